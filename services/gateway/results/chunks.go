package results

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/nats-io/nats.go/jetstream"
)

// Where an object store keeps an object's chunks (NATS ADR-20): a stream per
// bucket, a subject per object.
const (
	objectStream   = "OBJ_%s"     // bucket
	objectChunkSub = "$O.%s.C.%s" // bucket, object NUID
)

// chunkPrefetch bounds the chunks read ahead of the caller (128 KiB each by
// default in nats.go's Put).
const chunkPrefetch = 4

// errDigest: the chunks read do not hash to the digest the object's info holds.
var errDigest = errors.New("results: stored result does not match its digest")

// openChunks reads the chunks of info's object itself instead of through
// ObjectStore.Get. nats.go's object result (v1.55.0) holds its lock through a
// Read that waits for the next chunk, and stops the chunks' subscription when
// its context ends without ending that Read: a fetch whose caller went away
// midway waited for its deadline, and Close and a gateway's graceful stop with
// it. Here every wait is on ctx, and Close returns at once.
func (s *Store) openChunks(ctx context.Context, info *jetstream.ObjectInfo) (io.ReadCloser, error) {
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("results: object digest: %w", err)
	}
	r := &chunkReader{ctx: ctx, size: int64(info.Size), want: want, digest: sha256.New()}
	if info.Size == 0 {
		return r, nil
	}
	cons, err := s.js.OrderedConsumer(ctx, fmt.Sprintf(objectStream, s.cfg.Bucket), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{fmt.Sprintf(objectChunkSub, s.cfg.Bucket, info.NUID)},
		// A consumer that cannot be made again (its permission missing, the
		// stream gone) ends the read instead of being re-made until ctx ends.
		MaxResetAttempts: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("results: chunk consumer: %w", err)
	}
	if r.msgs, err = cons.Messages(jetstream.PullMaxMessages(chunkPrefetch)); err != nil {
		return nil, fmt.Errorf("results: chunk consumer: %w", err)
	}
	return r, nil
}

// chunkReader is a stored result read chunk by chunk, checked against its
// SHA-256 digest at the end.
type chunkReader struct {
	ctx        context.Context
	msgs       jetstream.MessagesContext // nil for an empty result
	size, read int64
	want       []byte
	digest     hash.Hash
	rest       []byte // unread part of the current chunk
	err        error  // sticky: io.EOF at the end
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 && r.err == nil {
		r.err = r.next()
	}
	if len(r.rest) == 0 {
		return 0, r.err
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// next reads the following chunk into rest, or ends the result.
func (r *chunkReader) next() error {
	if r.read == r.size {
		if !bytes.Equal(r.digest.Sum(nil), r.want) {
			return errDigest
		}
		return io.EOF
	}
	msg, err := r.msgs.Next(jetstream.NextContext(r.ctx))
	if err != nil {
		return fmt.Errorf("results: next chunk: %w", err)
	}
	data := msg.Data()
	if r.read += int64(len(data)); r.read > r.size {
		return fmt.Errorf("results: stored result longer than its %d bytes", r.size)
	}
	r.digest.Write(data)
	r.rest = data
	return nil
}

func (r *chunkReader) Close() error {
	if r.msgs != nil {
		r.msgs.Stop()
	}
	return nil
}
