package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-rtm/sluice/client"
)

// Entering a channel's presence and following who comes and goes.
func ExampleWithPresenceEvents() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := client.Dial(ctx, "127.0.0.1:7400", client.WithName("chat"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	sub, err := conn.Subscribe(ctx, "room", client.WithPresence(), client.WithPresenceEvents(), client.WithOccupancy())
	if err != nil {
		log.Fatal(err)
	}
	for ev := range sub.Events() {
		switch ev.Kind {
		case client.KindJoin:
			fmt.Printf("%s joined on %s\n", ev.Member.ClientID, ev.Member.Node)
		case client.KindLeave:
			fmt.Printf("%s left\n", ev.Member.ClientID)
		case client.KindOccupancy:
			fmt.Printf("%d members, %d subscribers\n", ev.Occupancy.Members, ev.Occupancy.Subscribers)
		}
		if members, complete := sub.Members(); complete {
			fmt.Printf("%d here now\n", len(members))
		}
	}
}

// A one-off look at a channel: its members and counts.
func ExampleConn_Presence() {
	ctx := context.Background()
	conn, err := client.Dial(ctx, "127.0.0.1:7400")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	st, err := conn.Presence(ctx, "room")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d subscribers, %d publishers, %d members\n", st.Occupancy.Subscribers, st.Occupancy.Publishers, st.Occupancy.Members)
	for _, m := range st.Members {
		fmt.Printf("%q on %s (connection %d): %s\n", m.ClientID, m.Node, m.Conn, m.Info)
	}
}
