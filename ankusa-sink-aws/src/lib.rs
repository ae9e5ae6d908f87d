//! Reserved for the Ankusa aws sink; it exports nothing yet (see the project's issue tracker).
