//! Reserved for the Ankusa claim-check store; it exports nothing yet (see the project's issue tracker).
