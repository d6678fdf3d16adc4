package program

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// errTooLarge is returned when a value's JSON passes its byte limit.
var errTooLarge = errors.New("value too large")

// maxDepth bounds the nesting of values converted either way.
const maxDepth = 64

// toJSON encodes a Starlark value as JSON, failing with errTooLarge as soon as
// the output passes limit bytes. Dicts keep their (deterministic) insertion
// order and need string keys; ints keep every digit; floats must be finite.
func toJSON(v starlark.Value, limit int) ([]byte, error) {
	w := &boundedBuf{limit: limit}
	if err := encodeValue(w, v, 0); err != nil {
		return nil, err
	}
	return w.Bytes(), nil
}

type boundedBuf struct {
	bytes.Buffer
	limit int
}

func (b *boundedBuf) put(s string) error {
	if b.Len()+len(s) > b.limit {
		return errTooLarge
	}
	b.WriteString(s)
	return nil
}

func encodeValue(w *boundedBuf, v starlark.Value, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("value nested deeper than %d", maxDepth)
	}
	switch v := v.(type) {
	case starlark.NoneType:
		return w.put("null")
	case starlark.Bool:
		return w.put(strconv.FormatBool(bool(v)))
	case starlark.Int:
		return w.put(v.String())
	case starlark.Float:
		f := float64(v)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("cannot encode non-finite float %v as JSON", f)
		}
		return w.put(strconv.FormatFloat(f, 'g', -1, 64))
	case starlark.String:
		return encodeString(w, string(v))
	case *starlark.Dict:
		if err := w.put("{"); err != nil {
			return err
		}
		for i, item := range v.Items() {
			k, ok := item[0].(starlark.String)
			if !ok {
				return fmt.Errorf("dict key %s is a %s, want a string", item[0], item[0].Type())
			}
			if i > 0 {
				if err := w.put(","); err != nil {
					return err
				}
			}
			if err := encodeString(w, string(k)); err != nil {
				return err
			}
			if err := w.put(":"); err != nil {
				return err
			}
			if err := encodeValue(w, item[1], depth+1); err != nil {
				return err
			}
		}
		return w.put("}")
	case *starlarkstruct.Struct:
		d := starlark.NewDict(len(v.AttrNames()))
		for _, name := range v.AttrNames() { // sorted
			x, err := v.Attr(name)
			if err != nil {
				return err
			}
			_ = d.SetKey(starlark.String(name), x)
		}
		return encodeValue(w, d, depth)
	case starlark.Indexable: // list, tuple
		if err := w.put("["); err != nil {
			return err
		}
		for i := range v.Len() {
			if i > 0 {
				if err := w.put(","); err != nil {
					return err
				}
			}
			if err := encodeValue(w, v.Index(i), depth+1); err != nil {
				return err
			}
		}
		return w.put("]")
	}
	return fmt.Errorf("cannot encode a %s as JSON", v.Type())
}

func encodeString(w *boundedBuf, s string) error {
	if len(s)+2 > w.limit-w.Len() {
		return errTooLarge
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return w.put(string(b))
}

// fromJSON decodes JSON into Starlark values: objects become dicts with keys
// in sorted order, integers become exact ints, other numbers floats. An
// integer of more than maxDigits digits (when maxDigits > 0) is refused: its
// conversion takes time quadratic in its length (budget_ints.go).
func fromJSON(data string, maxDigits int) (starlark.Value, error) {
	if strings.TrimSpace(data) == "" {
		return starlark.None, nil
	}
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return fromGo(x, 0, maxDigits)
}

func fromGo(x any, depth, maxDigits int) (starlark.Value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d", maxDepth)
	}
	switch x := x.(type) {
	case nil:
		return starlark.None, nil
	case bool:
		return starlark.Bool(x), nil
	case string:
		return starlark.String(x), nil
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if d := len(strings.TrimPrefix(s, "-")); maxDigits > 0 && d > maxDigits {
				return nil, &limitError{limit: LimitInt, msg: fmt.Sprintf(
					"a number of %d digits, over the limit of %d digits (ints have at most %d bits)", d, maxDigits, MaxIntBits)}
			}
			if n, ok := new(big.Int).SetString(s, 10); ok {
				return starlark.MakeBigInt(n), nil
			}
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", s, err)
		}
		return starlark.Float(f), nil
	case []any:
		l := make([]starlark.Value, len(x))
		for i, e := range x {
			v, err := fromGo(e, depth+1, maxDigits)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return starlark.NewList(l), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // a Go map's order is random; a replay must see the same dict
		d := starlark.NewDict(len(x))
		for _, k := range keys {
			v, err := fromGo(x[k], depth+1, maxDigits)
			if err != nil {
				return nil, err
			}
			_ = d.SetKey(starlark.String(k), v)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", x)
}
