package visibility

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"

	"go.temporal.io/api/serviceerror"
)

// Page tokens. A listing (ListRuns, ListPrograms, and MCP tasks/list, which
// carries theirs in its cursor) hands out Temporal's next-page token sealed
// for the listing that issued it: a version byte, the first 8 bytes of the
// SHA-256 of the listing's view (kind, viewer and query) and the token, then
// the token. A page token is checked before Temporal sees it, so a made-up
// or garbled one, or one issued for another viewer or query, is refused at
// once as the caller's mistake (ErrPageToken) instead of failing in the
// visibility store as a server error.
//
// The check is not a secret MAC: a key would have to be shared by every
// replica that serves listings. It need not be one either: a token crafted
// to pass it only reaches Temporal's own validation of its tokens, and every
// listing still shows a caller only what it may see.
const pageTokenVersion = 1

// pageSumBytes is how much of the SHA-256 a page token keeps.
const pageSumBytes = 8

// ErrPageToken refuses a page token this service did not issue for the
// listing it is given to.
var ErrPageToken = errors.New("the page token is not one this service issued; start again without it")

// PageView names what a listing shows: its kind ("runs", "programs"), whose
// (a subject, or every subject's when all is set) and its Temporal query.
func PageView(kind, subject string, all bool, query string) string {
	if all {
		subject = "*"
	}
	return kind + "\x00" + subject + "\x00" + query
}

// SealPage returns the page token of Temporal's token for view (nil for
// none: the last page).
func SealPage(view string, token []byte) []byte {
	if len(token) == 0 {
		return nil
	}
	out := make([]byte, 0, 1+pageSumBytes+len(token))
	out = append(out, pageTokenVersion)
	out = append(out, pageSum(view, token)...)
	return append(out, token...)
}

// OpenPage returns Temporal's token inside a page token SealPage made for
// view (nil for none: the first page), or ErrPageToken.
func OpenPage(view string, page []byte) ([]byte, error) {
	if len(page) == 0 {
		return nil, nil
	}
	if len(page) <= 1+pageSumBytes || page[0] != pageTokenVersion {
		return nil, ErrPageToken
	}
	token := page[1+pageSumBytes:]
	if string(page[1:1+pageSumBytes]) != string(pageSum(view, token)) {
		return nil, ErrPageToken
	}
	return token, nil
}

// pageSum is the check of token for view.
func pageSum(view string, token []byte) []byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(view)))
	h.Write(n[:])
	h.Write([]byte(view))
	h.Write(token)
	return h.Sum(nil)[:pageSumBytes]
}

// BadPageToken reports whether err is Temporal refusing a page token as
// invalid (one that passed OpenPage but not the visibility store).
func BadPageToken(err error) bool {
	var ia *serviceerror.InvalidArgument
	return errors.As(err, &ia)
}
