// A peer for the tests (test/checkpoint-go.test.ts): Go's own golang.org/x/mod/sumdb
// note and tlog packages check what nachtwacht signs and hashes. It reads one JSON
// request on stdin and writes one JSON answer on stdout.
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go run test/go/peer.go < request.json
package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type request struct {
	VKeys []string `json:"vkeys"`
	Keys  []string `json:"keys"` // verifier keys only parsed: note.NewVerifier's answer
	Notes []string `json:"notes"`
	Trees []struct {
		Leaves []string `json:"leaves"` // base64 leaf data
		Proofs []int64  `json:"proofs"` // leaf indexes to prove
		Check  []struct {
			Index int64    `json:"index"`
			Proof []string `json:"proof"` // base64 hashes, checked with tlog.CheckRecord
		} `json:"check"`
	} `json:"trees"`
	Sign *struct {
		Name string `json:"name"`
		Text string `json:"text"`
	} `json:"sign"`
}

type openedNote struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Text   string `json:"text,omitempty"`
	Origin string `json:"origin,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Root   string `json:"root,omitempty"`
}

type treeAnswer struct {
	Root   string              `json:"root"`
	Proofs map[string][]string `json:"proofs"`
	Checks []string            `json:"checks"` // "" when the proof held, else the error
}

type answer struct {
	Keys  []string          `json:"keys"` // "" when note.NewVerifier accepted the key, else the error
	Notes []openedNote      `json:"notes"`
	Trees []treeAnswer      `json:"trees"`
	Sign  map[string]string `json:"sign,omitempty"`
}

func b64(h tlog.Hash) string { return base64.StdEncoding.EncodeToString(h[:]) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fail(err)
	}
	var verifiers []note.Verifier
	for _, k := range req.VKeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			fail(fmt.Errorf("verifier %q: %v", k, err))
		}
		verifiers = append(verifiers, v)
	}
	var ans answer
	for _, k := range req.Keys {
		if _, err := note.NewVerifier(k); err != nil {
			ans.Keys = append(ans.Keys, err.Error())
		} else {
			ans.Keys = append(ans.Keys, "")
		}
	}
	for _, msg := range req.Notes {
		n, err := note.Open([]byte(msg), note.VerifierList(verifiers...))
		if err != nil {
			ans.Notes = append(ans.Notes, openedNote{OK: false, Error: err.Error()})
			continue
		}
		o := openedNote{OK: true, Text: n.Text}
		// A C2SP checkpoint body: origin, tree size, base64 root (tlog.ParseTree wants Go's own origin).
		lines := strings.Split(n.Text, "\n")
		if len(lines) >= 4 {
			if size, err := strconv.ParseInt(lines[1], 10, 64); err == nil {
				if root, err := base64.StdEncoding.DecodeString(lines[2]); err == nil && len(root) == 32 {
					o.Origin, o.Size, o.Root = lines[0], size, lines[2]
				}
			}
		}
		ans.Notes = append(ans.Notes, o)
	}
	for _, t := range req.Trees {
		var stored []tlog.Hash
		reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(idx))
			for i, x := range idx {
				out[i] = stored[x]
			}
			return out, nil
		})
		var leafHashes []tlog.Hash
		for i, l := range t.Leaves {
			data, err := base64.StdEncoding.DecodeString(l)
			if err != nil {
				fail(err)
			}
			hs, err := tlog.StoredHashes(int64(i), data, reader)
			if err != nil {
				fail(err)
			}
			stored = append(stored, hs...)
			leafHashes = append(leafHashes, tlog.RecordHash(data))
		}
		n := int64(len(t.Leaves))
		root, err := tlog.TreeHash(n, reader)
		if err != nil {
			fail(err)
		}
		ta := treeAnswer{Root: b64(root), Proofs: map[string][]string{}}
		for _, idx := range t.Proofs {
			p, err := tlog.ProveRecord(n, idx, reader)
			if err != nil {
				fail(err)
			}
			var hs []string
			for _, h := range p {
				hs = append(hs, b64(h))
			}
			ta.Proofs[strconv.FormatInt(idx, 10)] = hs
		}
		for _, c := range t.Check {
			var p tlog.RecordProof
			for _, s := range c.Proof {
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil || len(raw) != 32 {
					fail(fmt.Errorf("bad proof hash %q", s))
				}
				var h tlog.Hash
				copy(h[:], raw)
				p = append(p, h)
			}
			if err := tlog.CheckRecord(p, n, root, c.Index, leafHashes[c.Index]); err != nil {
				ta.Checks = append(ta.Checks, err.Error())
			} else {
				ta.Checks = append(ta.Checks, "")
			}
		}
		ans.Trees = append(ans.Trees, ta)
	}
	if req.Sign != nil {
		skey, vkey, err := note.GenerateKey(rand.Reader, req.Sign.Name)
		if err != nil {
			fail(err)
		}
		signer, err := note.NewSigner(skey)
		if err != nil {
			fail(err)
		}
		msg, err := note.Sign(&note.Note{Text: req.Sign.Text}, signer)
		if err != nil {
			fail(err)
		}
		ans.Sign = map[string]string{"skey": skey, "vkey": vkey, "note": string(msg)}
	}
	if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
		fail(err)
	}
}
