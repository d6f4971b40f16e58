package aggregator

// SetAfterRecord installs a hook that runs after each batch is recorded in
// Redis; when it returns true the batch is abandoned there, before any event
// is published or message acknowledged, as if the process had died.
func SetAfterRecord(a *Aggregator, f func() bool) { a.afterRecord = f }
