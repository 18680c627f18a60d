package meta

import "fmt"

// Kind says what a command changes. Byte layout of every command:
//
//	u8  kind
//	i64 time   the proposer's clock (unix ns); the state machine reads no other
//	...        the kind's fields, below
//
// Names are str8 (u8 length, bytes), sets are u8 count then str8 each,
// flags u8 0 or 1. Compatibility rule: a kind's layout never changes; a
// new field means a new kind, and a node that meets a kind it does not know
// applies nothing and answers ResultInvalid (every node alike, so the
// replicas never diverge).
type Kind uint8

const (
	// KindCreate creates channel as a new incarnation with epoch Epoch if
	// it does not exist (Epoch must be above every epoch given out before:
	// State.NewEpoch proposes one); an existing channel is left as it is:
	// str8 channel, u64 epoch.
	KindCreate Kind = 1
	// KindOpen closes the channel's open tail as Seal says and appends
	// New, open, at the next position, if the channel's epoch and newest
	// streamlet are still Epoch and Tail, and that streamlet is still open
	// when Seal is set (End > 0), closed when not (compare-and-set: the
	// new streamlet starts where its proposer hosted it).
	// When the channel does not exist and Tail is 0, the OPEN creates it
	// with epoch Epoch, as CREATE does:
	// str8 channel, u64 epoch, u64 tail, seal, new.
	KindOpen Kind = 2
	// KindClose closes the open streamlet Tail as Seal says: str8 channel,
	// u64 epoch, u64 tail, seal.
	KindClose Kind = 3
	// KindHolders changes the holders of closed streamlet Tail: Add are
	// put first (readers read from the first), Remove taken out; a
	// streamlet left with no holder is lost: str8 channel, u64 epoch,
	// u64 tail, set add, set remove.
	KindHolders Kind = 4
	// KindNodeGone says that what Node held is gone (it died, left, or
	// restarted: hosts keep streamlets in memory only) and that its
	// incarnation from now on is Instance ("" while it has none): Node is
	// taken out of the holders of every closed streamlet of every channel
	// (a streamlet left with none is lost), and only the node running
	// incarnation Instance may hold new ones (State.Instance):
	// str8 node, str8 instance.
	KindNodeGone Kind = 5
	// KindExpire frees, per entry, the channel's closed streamlets up to
	// and including ID (a prefix of its list), if the epoch matches:
	// u32 n, n x (str8 channel, u64 epoch, u64 id).
	KindExpire Kind = 6
	// KindDrop removes, per entry, the channel if its epoch matches and it
	// retains nothing: u32 n, n x (str8 channel, u64 epoch).
	KindDrop Kind = 7
)

func (k Kind) String() string {
	switch k {
	case KindCreate:
		return "CREATE"
	case KindOpen:
		return "OPEN"
	case KindClose:
		return "CLOSE"
	case KindHolders:
		return "HOLDERS"
	case KindNodeGone:
		return "NODE_GONE"
	case KindExpire:
		return "EXPIRE"
	case KindDrop:
		return "DROP"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Seal says how an open streamlet ends. Layout: u64 end, u8 lost,
// set keep, i64 ttl.
type Seal struct {
	// End is one past its last position (at least its First). For a lost
	// streamlet it is the largest end it could have reached (its First
	// plus the message limit): positions below are never handed out again.
	End  uint64
	Lost bool
	// Keep, when not empty, replaces the replica set: the replicas that
	// hold [First, End) after a recovery.
	Keep []string
	// TTL is the channel's retention: the streamlet is freed TTL after it
	// closed, and never before its predecessor.
	TTL int64
}

// NewStreamlet is the streamlet an OPEN appends. Layout: u64 id, set replicas,
// i64 life.
type NewStreamlet struct {
	ID uint64
	// Replicas hold it, the orderer first (at least one).
	Replicas []string
	// Life is its write lease: it takes no writes from Time + Life on.
	Life int64
}

// Ref names a channel incarnation and one of its streamlets (0: none) in
// an EXPIRE or DROP batch.
type Ref struct {
	Channel string
	Epoch   uint64
	ID      uint64
}

// Cmd is one command of the log. Which fields a kind uses is said at its
// Kind constant; the others are zero.
type Cmd struct {
	Kind    Kind
	Time    int64
	Channel string
	Epoch   uint64
	Tail    uint64
	Seal    Seal
	New     NewStreamlet
	Add     []string
	Remove  []string
	Node    string
	// Instance is NODE_GONE's next incarnation of Node.
	Instance string
	Batch    []Ref
}

// Result is the state machine's answer to a command (one byte).
type Result uint8

const (
	// ResultOK: applied.
	ResultOK Result = 0
	// ResultConflict: the channel is not as the command expected (another
	// proposer, or a change the proposer had not seen yet, came first);
	// nothing changed. Read the state and decide again.
	ResultConflict Result = 1
	// ResultInvalid: the command cannot be applied as encoded (malformed,
	// an unknown kind, or values that break an invariant); nothing changed.
	ResultInvalid Result = 2
)

func (r Result) String() string {
	switch r {
	case ResultOK:
		return "ok"
	case ResultConflict:
		return "conflict"
	case ResultInvalid:
		return "invalid"
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// AppendCmd appends the encoding of c to dst. It panics on a command the
// format cannot carry (a name over MaxName bytes, a set over MaxSet, a
// batch over MaxBatch): the proposer's bug, never input.
func AppendCmd(dst []byte, c *Cmd) []byte {
	e := enc{b: dst}
	e.u8(uint8(c.Kind))
	e.i64(c.Time)
	switch c.Kind {
	case KindCreate:
		e.str8(c.Channel)
		e.u64(c.Epoch)
	case KindOpen:
		e.str8(c.Channel)
		e.u64(c.Epoch)
		e.u64(c.Tail)
		appendSeal(&e, &c.Seal)
		e.u64(c.New.ID)
		e.set(c.New.Replicas)
		e.i64(c.New.Life)
	case KindClose:
		e.str8(c.Channel)
		e.u64(c.Epoch)
		e.u64(c.Tail)
		appendSeal(&e, &c.Seal)
	case KindHolders:
		e.str8(c.Channel)
		e.u64(c.Epoch)
		e.u64(c.Tail)
		e.set(c.Add)
		e.set(c.Remove)
	case KindNodeGone:
		e.str8(c.Node)
		e.str8(c.Instance)
	case KindExpire, KindDrop:
		if len(c.Batch) > MaxBatch {
			panic(fmt.Sprintf("meta: %v batch of %d (max %d)", c.Kind, len(c.Batch), MaxBatch))
		}
		e.u32(uint32(len(c.Batch)))
		for _, r := range c.Batch {
			e.str8(r.Channel)
			e.u64(r.Epoch)
			if c.Kind == KindExpire {
				e.u64(r.ID)
			}
		}
	default:
		panic(fmt.Sprintf("meta: encoding an unknown command %v", c.Kind))
	}
	return e.b
}

func appendSeal(e *enc, s *Seal) {
	e.u64(s.End)
	e.flag(s.Lost)
	e.set(s.Keep)
	e.i64(s.TTL)
}

// DecodeCmd decodes one command. Every error wraps ErrMalformed and names
// the command, the field and its offset. Decoded strings and sets are
// copies (the input may be reused).
func DecodeCmd(b []byte) (Cmd, error) {
	d := dec{b: b, what: "command"}
	var c Cmd
	c.Kind = Kind(d.u8("kind"))
	c.Time = d.i64("time")
	if d.err != nil {
		return Cmd{}, d.err
	}
	d.what = c.Kind.String()
	switch c.Kind {
	case KindCreate:
		c.Channel = d.name("channel")
		c.Epoch = d.u64("epoch")
	case KindOpen:
		c.Channel = d.name("channel")
		c.Epoch = d.u64("epoch")
		c.Tail = d.u64("tail")
		c.Seal = decodeSeal(&d)
		c.New.ID = d.u64("new id")
		off := d.off
		c.New.Replicas = d.set("new replicas")
		if d.err == nil && len(c.New.Replicas) == 0 {
			d.failf("new replicas at offset %d is empty", off)
		}
		c.New.Life = d.i64("new life")
		if d.err == nil && c.New.ID == 0 {
			d.failf("new id is 0")
		}
	case KindClose:
		c.Channel = d.name("channel")
		c.Epoch = d.u64("epoch")
		c.Tail = d.u64("tail")
		c.Seal = decodeSeal(&d)
	case KindHolders:
		c.Channel = d.name("channel")
		c.Epoch = d.u64("epoch")
		c.Tail = d.u64("tail")
		c.Add = d.set("add")
		c.Remove = d.set("remove")
	case KindNodeGone:
		c.Node = d.name("node")
		c.Instance = d.str8("instance")
	case KindExpire, KindDrop:
		min := 1 + 1 + 8 // a name of one byte and an epoch
		if c.Kind == KindExpire {
			min += 8
		}
		n := d.count("batch count", MaxBatch, min)
		if n > 0 {
			c.Batch = make([]Ref, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			c.Batch[i].Channel = d.name("channel")
			c.Batch[i].Epoch = d.u64("epoch")
			if c.Kind == KindExpire {
				c.Batch[i].ID = d.u64("id")
			}
		}
	default:
		d.failf("unknown kind %d", uint8(c.Kind))
	}
	if err := d.done(); err != nil {
		return Cmd{}, err
	}
	return c, nil
}

func decodeSeal(d *dec) Seal {
	var s Seal
	s.End = d.u64("seal end")
	s.Lost = d.flag("seal lost")
	s.Keep = d.set("seal keep")
	s.TTL = d.i64("seal ttl")
	return s
}
