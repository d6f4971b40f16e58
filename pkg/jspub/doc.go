// Package jspub publishes batches of messages to NATS JetStream
// asynchronously and reports one outcome per message.
//
// It is separate from natsutil so that code publishing jobs, such as the
// producer SDK, does not link the embedded NATS server that natsutil starts.
package jspub
