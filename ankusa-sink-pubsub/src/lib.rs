//! Reserved for the Ankusa pubsub sink; it exports nothing yet (see the project's issue tracker).
