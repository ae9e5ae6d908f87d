//! The dispatcher through the binary against RabbitMQ: the claim check once per hook, and a
//! SIGTERM mid-run that loses no hook.
