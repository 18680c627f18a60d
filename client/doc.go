// Package client is the Go SDK of Sluice: it publishes to and subscribes to
// channels of a Sluice server (or cluster) over protocol v1 (package wire).
//
//	conn, err := client.Dial(ctx, "127.0.0.1:7400,127.0.0.1:7401", client.WithName("svc"))
//	if err != nil { return err }
//	defer conn.Close()
//	pos, err := conn.Publish(ctx, "prices", []byte("42"))       // waits for the PUBACK
//	sub, err := conn.Subscribe(ctx, "prices", client.FromPosition(pos))
//	for {
//		ev, err := sub.Next(ctx)
//		if err != nil { return err }                           // ended (see sub.Err)
//		switch ev.Kind {
//		case client.KindMessage: use(ev.Position, ev.Payload)
//		case client.KindGap: log.Printf("missed %d-%d: %v", ev.Gap.From, ev.Gap.To, ev.Gap.Reason)
//		}
//	}
//
// # Contracts
//
// A Conn and its Subscriptions are safe for concurrent use; every call that
// can block takes a context. A Conn runs three goroutines: a reader, a writer
// (which also sends PINGs) and a supervisor (which reconnects).
//
// Publishing: Publish waits for the acknowledgement; PublishAsync and
// PublishFunc return at once and report later. At most WithMaxPending
// publishes await acknowledgement; more block (with their context) until
// one completes. Publishes queued together are written with one system call.
// PublishNoAck asks for no acknowledgement at all (at most once, like a
// core NATS publish); it blocks only while 1 MiB of output waits for the
// socket.
//
// Unacknowledged publishes are never resent: if the connection is lost (or
// closed) before a publish's PUBACK, the publish fails with an error matching
// ErrUnknownOutcome, because the server may or may not have stored it. The
// application decides whether to publish again (and so risk a duplicate).
// Publishes issued while reconnecting wait for the new connection.
//
// Subscribing: events come in position order through a bounded queue per
// subscription (WithBuffer). When a queue is full the Conn's reader waits,
// so TCP backpressure reaches the server (whose slow-consumer policy may send
// a Gap with reason slow, or disconnect); meanwhile the Conn's other
// subscriptions and acknowledgements wait too. Use one Conn per independent
// slow consumer.
//
// Reconnecting (WithReconnect, on by default): after a lost connection or a
// GOAWAY, the Conn dials the next address (seeds, then nodes the server
// listed in WELCOME) with exponential backoff and full jitter, and resumes
// every subscription from the position after the last event it queued, with
// the epoch it saw, so no message is skipped or repeated: a missing range is
// a KindGap event, a changed epoch a KindEpochChanged event, and duplicates
// are dropped. Two handshakes in a row refused as UNAUTHENTICATED (wrong or
// revoked credentials) end the reconnecting: the Conn closes with that
// *ServerError, which its subscriptions and later calls report.
package client
