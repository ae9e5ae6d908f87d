//! [`RegisteredConfig`]: the parsed config of a sink type another crate registered, its
//! type erased. Its own file so that `config` (whose `SinkConfig` holds one) and `registry`
//! (which makes them) both depend on it and not on each other.

use crate::config_error::ConfigError;
use ankusa_sink_core::Sink;
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What a registered builder's future gives: the sink, or the refusal as [`ConfigError::Build`].
pub(crate) type Building = Pin<Box<dyn Future<Output = Result<Arc<dyn Sink>, ConfigError>> + Send>>;

/// A registered type's builder, its error already turned into a [`ConfigError`].
pub(crate) type BuildFn<C> = dyn Fn(C) -> Building + Send + Sync;

/// The config of a type another crate registered ([`Registry::register`](crate::Registry::register)): its options,
/// parsed, and the builder that turns them into a sink.
#[derive(Clone)]
pub struct RegisteredConfig {
    ty: &'static str,
    inner: Arc<dyn Erased>,
}

impl RegisteredConfig {
    /// A parsed `config` of the registered type `ty`, with its builder.
    pub(crate) fn new<C: Clone + fmt::Debug + Send + Sync + 'static>(
        ty: &'static str,
        config: C,
        build: Arc<BuildFn<C>>,
    ) -> Self {
        RegisteredConfig {
            ty,
            inner: Arc::new(Parsed { config, build }),
        }
    }

    /// The `type` it was registered as.
    pub fn kind(&self) -> &'static str {
        self.ty
    }

    /// The parsed options, when they are a `C`.
    pub fn config<C: 'static>(&self) -> Option<&C> {
        self.inner.as_any().downcast_ref()
    }

    /// Build the sink with the registered builder.
    pub(crate) async fn build(&self) -> Result<Arc<dyn Sink>, ConfigError> {
        self.inner.build().await
    }
}

impl fmt::Debug for RegisteredConfig {
    /// The type and its config's own `Debug` (which keeps its secrets out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredConfig")
            .field("type", &self.ty)
            .field("config", &self.inner.debug())
            .finish()
    }
}

/// A registered type's parsed config, its type erased.
trait Erased: Send + Sync {
    fn build(&self) -> Building;
    fn as_any(&self) -> &dyn Any;
    fn debug(&self) -> &dyn fmt::Debug;
}

/// A parsed `C` and its builder.
struct Parsed<C> {
    config: C,
    build: Arc<BuildFn<C>>,
}

impl<C: Clone + fmt::Debug + Send + Sync + 'static> Erased for Parsed<C> {
    fn build(&self) -> Building {
        (self.build)(self.config.clone())
    }

    fn as_any(&self) -> &dyn Any {
        &self.config
    }

    fn debug(&self) -> &dyn fmt::Debug {
        &self.config
    }
}
