// Package deadletter builds the dead letters of messages a service cannot
// accept (bulkaction.dlq.<tenant>.<reason>), with the reason and the body, bounded
// so that the DLQ stream always takes them: bad input never blocks a
// stream and is never silently lost. internal/consume publishes them.
package deadletter

import (
	"strconv"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// headerRoom is what a dead letter leaves of the message limit for its
// headers (Nats-Msg-Id and the server's own).
const headerRoom = 512

// Message builds the DLQ message of a rejected JetStream message, at most
// limit bytes with its headers: a body too large to carry whole is cut
// ([contracts.DeadLetter.Encode]). Its subject names the tenant of the
// message's subject ([contracts.Names.DLQOf]). Its Nats-Msg-Id is the message's stream
// and sequence, so a redelivered message is dead-lettered once.
func Message(names contracts.Names, msg jetstream.Msg, cause error, limit int) (*nats.Msg, contracts.DeadLetter, error) {
	dl := contracts.NewDeadLetter(msg.Subject(), msg.Data(), cause)
	data, err := dl.Encode(limit - headerRoom)
	if err != nil {
		return nil, dl, err
	}
	m := nats.NewMsg(names.DLQOf(msg.Subject(), dl.Reason))
	m.Data = data
	if md, err := msg.Metadata(); err == nil {
		m.Header.Set(jetstream.MsgIDHeader, "dlq:"+md.Stream+":"+strconv.FormatUint(md.Sequence.Stream, 10))
	}
	return m, dl, nil
}
