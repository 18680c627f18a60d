package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterNode is one member of a clustered nats-server with JetStream
// (routes between the members, memory and a temporary store directory),
// as the replicated JetStream benchmark runs them.
type ClusterNode struct {
	Embedded
}

// StartClusterNode starts member name of cluster "sluice-bench" with
// JetStream: clients on clientAddr, routes on routeAddr, connecting to
// routes (the other members' route addresses, "nats://host:port"). It
// waits until the node accepts client connections; the JetStream meta
// group forms once a quorum of members runs (CreateReplicatedStream waits
// for it).
func StartClusterNode(name, clientAddr, routeAddr string, routes []string) (*ClusterNode, error) {
	ch, cp, err := splitAddr(clientAddr)
	if err != nil {
		return nil, err
	}
	rh, rp, err := splitAddr(routeAddr)
	if err != nil {
		return nil, err
	}
	e, err := startEmbedded(&server.Options{
		ServerName: name, Host: ch, Port: cp,
		Cluster: server.ClusterOpts{Name: "sluice-bench", Host: rh, Port: rp},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		return nil, err
	}
	return &ClusterNode{*e}, nil
}

func splitAddr(addr string) (string, int, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("peer: address %q: %w", addr, err)
	}
	var port int
	if _, err := fmt.Sscan(portS, &port); err != nil || port <= 0 {
		return "", 0, fmt.Errorf("peer: address %q: port must be given", addr)
	}
	return host, port, nil
}

// CreateReplicatedStream connects to url and creates (or recreates, empty)
// the memory stream name over subjects with the given number of replicas.
// A cluster whose JetStream meta group has no leader yet answers with an
// error: it is asked again every 250 ms until ctx ends. remove deletes the
// stream and closes the admin connection.
func CreateReplicatedStream(ctx context.Context, url, name string, subjects []string, replicas int) (remove func(context.Context) error, err error) {
	nc, js, err := adminJetStream(url)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.MemoryStorage, Replicas: replicas}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = js.DeleteStream(actx, name)
		_, err = js.CreateStream(actx, cfg)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("peer: create stream %s (R%d): %w", name, replicas, errors.Join(err, ctx.Err()))
		case <-t.C:
		}
	}
	return func(ctx context.Context) error {
		err := js.DeleteStream(ctx, name)
		nc.Close()
		return err
	}, nil
}

// JetStreamNode returns a driver whose clients connect to url and publish
// acknowledged messages with JetStream (PublishAsync) to whatever stream
// captures their subjects, e.g. one made by CreateReplicatedStream; its
// subscriptions are core NATS subscriptions (live deliveries).
func JetStreamNode(url string) *NATSDriver {
	return &NATSDriver{URL: url, jetStream: true}
}

// JetStreamStreamNode is JetStreamNode whose subscriptions read stream:
// each is an ordered consumer (on the subscriber's connection) that starts
// at the stream's next message, so a message reaches it only once the
// stream has stored it, which on a replicated stream is after its RAFT
// group committed it. That is what a JetStream reader of replicated data
// sees; JetStreamNode's core subscriptions see a publish as soon as the
// server routes it, before it is stored or replicated.
func JetStreamStreamNode(url, stream string) *NATSDriver {
	return &NATSDriver{URL: url, jetStream: true, liveStream: stream}
}
