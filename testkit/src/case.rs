//! [`Case`]: the names of the conformance cases. A leaf: the harness trait and the suite
//! both use it, and it uses neither.

use std::fmt;

/// `Case`, `Case::ALL`, `Case::name` and `Case::doc`, from the one case list in
/// [`__with_cases!`](crate::__with_cases).
macro_rules! define_case_enum {
    ([] $($name:ident => $case:ident : $run:path, $doc:literal;)*) => {
        /// Every case of the suite, named as the generated tests are.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Case {
            $(
                #[doc = $doc]
                $case,
            )*
        }

        impl Case {
            /// Every case, in suite order.
            pub const ALL: [Case; [$(Case::$case),*].len()] = [$(Case::$case),*];

            /// The test name, e.g. `round_trip`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Case::$case => stringify!($name),)*
                }
            }

            /// What the case checks, in one sentence.
            pub const fn doc(self) -> &'static str {
                match self {
                    $(Case::$case => $doc,)*
                }
            }

            /// The case named `name` (a test name), if there is one.
            pub fn from_name(name: &str) -> Option<Case> {
                Case::ALL.into_iter().find(|c| c.name() == name)
            }

            /// Whether a **not provided** skip of this case keeps a report from saying
            /// "certified": the fault cases (`classify_*`, cold and warm) and `recovery`.
            pub fn certifies(self) -> bool {
                self.name().starts_with("classify_") || matches!(self, Case::Recovery)
            }
        }
    };
}

crate::__with_cases!(define_case_enum;);

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
