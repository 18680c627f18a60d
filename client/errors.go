package client

import (
	"errors"
	"fmt"

	"github.com/sluice-rtm/sluice/wire"
)

// Sentinel errors of the client. Match them with errors.Is; the returned
// errors wrap them with context (and often a cause, e.g. a *wire.Error or an
// I/O error, also reachable with errors.Is / errors.As).
var (
	// ErrClosed: the Conn was closed (by Close, Drain, or, without
	// reconnect, by the loss of its connection).
	ErrClosed = errors.New("client: connection closed")
	// ErrDraining: Drain has started; no new publishes or subscriptions.
	ErrDraining = errors.New("client: connection draining")
	// ErrUnknownOutcome: a publish was written (or may have been written)
	// but its PUBACK never arrived because the connection was lost, the Conn
	// was closed, or the caller's context ended. The message may or may not
	// have been published. The client never resends it by itself, except
	// with WithIdempotence (which reports it only when its retry time is
	// over or the Conn closed). Publishing the same message again with the
	// same Msg.ID is safe within the server's dedup window.
	ErrUnknownOutcome = errors.New("client: publish outcome unknown")
	// ErrDisconnected: the connection to the server was lost (wrapped
	// together with the cause).
	ErrDisconnected = errors.New("client: disconnected")
	// ErrPingTimeout: the server did not answer PINGs for two ping
	// intervals (not counting intervals in which it was reading at least
	// 64 KiB of this connection's bytes, at most 10 in a row); the
	// connection is treated as dead.
	ErrPingTimeout = errors.New("client: ping timeout")
	// ErrProtocol: the server sent something protocol v1 does not allow
	// (the cause often wraps wire.ErrMalformed). The connection is dropped.
	ErrProtocol = errors.New("client: protocol violation by server")
	// ErrPayloadTooLarge: the payload exceeds the server's WELCOME.MaxPayload;
	// nothing was sent.
	ErrPayloadTooLarge = errors.New("client: payload too large")
	// ErrInvalidChannel: the channel name is invalid; nothing was sent. The
	// errors returned also match wire.ErrInvalidChannel.
	ErrInvalidChannel = errors.New("client: invalid channel")
	// ErrInvalidOption: a Dial option or SubOption has an invalid value.
	ErrInvalidOption = errors.New("client: invalid option")
	// ErrUnsubscribed: the subscription was ended by Unsubscribe.
	ErrUnsubscribed = errors.New("client: unsubscribed")
	// ErrInvalidHeaders: a message's headers or id break the rules of
	// PROTOCOL.md 2.14 (wire.CheckHeaders, wire.CheckMsgID); nothing was
	// sent. The errors returned also match wire.ErrInvalidHeaders.
	ErrInvalidHeaders = errors.New("client: invalid message headers")
	// ErrHeadersUnsupported: a message with headers or an id was published
	// to a server that did not accept wire.FeatureHeaders; nothing was sent.
	ErrHeadersUnsupported = errors.New("client: server does not accept message headers")
	// ErrPresenceUnsupported: a presence query to a server that did not
	// accept wire.FeaturePresence; nothing was sent.
	ErrPresenceUnsupported = errors.New("client: server does not offer presence")
)

// ServerError is an ERROR (or GOAWAY) frame received from the server,
// together with the operation it answered. errors.As finds the wire.Error
// through it, with a target of type *wire.Error or **wire.Error.
type ServerError struct {
	Op  string // "hello", "publish", "subscribe", "unsubscribe", "connection", "goaway"
	Err wire.Error
}

// Error implements error.
func (e *ServerError) Error() string { return "client: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the wire.Error value.
func (e *ServerError) Unwrap() error { return e.Err }

// As lets errors.As fill a **wire.Error target with a pointer to a copy of
// the wire error (a *wire.Error target is filled through Unwrap).
func (e *ServerError) As(target any) bool {
	if p, ok := target.(**wire.Error); ok {
		we := e.Err
		*p = &we
		return true
	}
	return false
}

// errRetryOver is the cause of ErrUnknownOutcome for a publish that
// WithIdempotence stopped resending.
var errRetryOver = errors.New("client: idempotent publish not acknowledged within its retry time")

func serverErr(op string, e wire.Error) error { return &ServerError{Op: op, Err: e} }

// isCode reports whether err is, or wraps, a server refusal with code.
func isCode(err error, code wire.Code) bool {
	var se *ServerError
	return errors.As(err, &se) && se.Err.Code == code
}

// unknownOutcome wraps cause into an error that matches ErrUnknownOutcome.
func unknownOutcome(cause error) error {
	if cause == nil {
		return ErrUnknownOutcome
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, cause)
}

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}
