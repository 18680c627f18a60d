package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/sluice-rtm/sluice/engine"
)

const tokenDescription = `
Prints a new random token (256 bits, URL-safe base64) on the first line
and its hash on the second. Give the token to the client (pub/sub --token,
or client.WithToken) and put only the hash in the server's configuration
file ([[auth.tokens]] hash = "sha256:..."). With --hash, reads a token
from the first line of standard input instead and prints only its hash.`

func runToken(_ context.Context, std stdio, args []string) int {
	fs := newFlagSet("token", "[--hash]", tokenDescription)
	hashOnly := fs.Bool("hash", false, "hash the token read from standard input instead of making one")
	if code, done := parseOnly(fs, std, args); done {
		return code
	}
	if *hashOnly {
		line, err := bufio.NewReader(std.in).ReadString('\n')
		tok := strings.TrimRight(line, "\r\n")
		if tok == "" {
			if err == nil {
				err = fmt.Errorf("empty token")
			}
			fmt.Fprintf(std.err, "sluice token: reading the token: %v\n", err)
			return exitFail
		}
		fmt.Fprintln(std.out, engine.HashToken([]byte(tok)))
		return exitOK
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	fmt.Fprintln(std.out, tok)
	fmt.Fprintln(std.out, engine.HashToken([]byte(tok)))
	return exitOK
}
