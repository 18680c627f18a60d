package main

import (
	"flag"

	"github.com/sluice-rtm/sluice/engine"
)

// bindPresenceFlags defines the --presence-* flags of serve (the keys of
// the configuration file's [presence] table; docs/presence.md).
func bindPresenceFlags(fs *flag.FlagSet, p *engine.PresenceOptions) {
	fs.IntVar(&p.MaxMembers, "presence-max-members", p.MaxMembers, "presence members of one channel, `N`: a subscription that would enter past it gets ERROR UNAVAILABLE")
	fs.Var(byteSize{&p.MaxBytes}, "presence-max-bytes", "memory of the presence members this node holds, `BYTES` (128 bytes plus client id and info each)")
	fs.IntVar(&p.EventsMax, "presence-events-max", p.EventsMax, "past `N` members a channel sends occupancy instead of join and leave events (they resume at 3/4 of N)")
	fs.DurationVar(&p.OccupancyInterval, "presence-occupancy-interval", p.OccupancyInterval, "most often an occupancy subscription gets the counts, `DUR`")
	fs.DurationVar(&p.PublisherWindow, "presence-publisher-window", p.PublisherWindow, "a connection counts as a channel's publisher for `DUR` after it published to it")
}
