//! Reserved for the Ankusa kafka sink; it exports nothing yet (see the project's issue tracker).
