package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

// A publisher and a subscriber that resumes where it left off.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, "127.0.0.1:7400", client.WithName("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	pos, err := conn.Publish(ctx, "prices", []byte("42"))
	if errors.Is(err, client.ErrUnknownOutcome) {
		log.Print("connection lost before the ack: the message may or may not be stored")
	} else if err != nil {
		log.Fatal(err)
	}

	sub, err := conn.Subscribe(ctx, "prices", client.FromPosition(pos))
	if err != nil {
		log.Fatal(err)
	}
	for ev := range sub.Events() {
		switch ev.Kind {
		case client.KindMessage:
			fmt.Printf("%d: %s\n", ev.Position, ev.Payload)
		case client.KindGap:
			fmt.Printf("missed %d-%d (%v)\n", ev.Gap.From, ev.Gap.To, ev.Gap.Reason)
		case client.KindEpochChanged:
			fmt.Printf("channel recreated (epoch %d)\n", ev.Epoch)
		}
	}
	log.Print("subscription ended: ", sub.Err())
}

// Pipelined publishing: results arrive in any order, each on its future.
func ExampleConn_PublishAsync() {
	ctx := context.Background()
	conn, err := client.Dial(ctx, "127.0.0.1:7400", client.WithMaxPending(4096))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	var acks []*client.PubAck
	for i := range 1000 {
		a, err := conn.PublishAsync(ctx, "ticks", fmt.Appendf(nil, "tick %d", i))
		if err != nil {
			log.Fatal(err) // nothing was sent for this one
		}
		acks = append(acks, a)
	}
	for _, a := range acks {
		<-a.Done()
		if a.Err() != nil {
			log.Print(a.Err())
		}
	}
}
