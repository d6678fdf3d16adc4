package contract

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Digest returns a digest of a toolkit's contract, "sha256:<hex>": the service
// (methods, their types and options), every message and enum its methods reach
// (field numbers, types, names, options such as buf.validate rules) and the tool
// definitions derived from it (descriptions, including those taken from comments,
// schemas, hints, requirements). Two servers with equal digests accept the same
// requests and show models the same tools; a registry uses it to refuse a replica
// that claims a served Toolkit@version with another contract.
//
// Source locations other than the comments that become descriptions do not
// count, so the same .proto compiled twice has one digest. Encoding is
// deterministic protobuf, so a digest is stable within one build of toolfleet;
// compare digests computed by the same code, not across versions of it.
func Digest(sd protoreflect.ServiceDescriptor) (string, error) {
	h := sha256.New()
	mo := proto.MarshalOptions{Deterministic: true}
	write := func(m proto.Message) error {
		b, err := mo.Marshal(m)
		if err != nil {
			return err
		}
		// Length-prefixed, so that no two sequences of parts hash alike.
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
		return nil
	}
	if err := write(protodesc.ToServiceDescriptorProto(sd)); err != nil {
		return "", fmt.Errorf("%w: digest of %s: %w", ErrInvalidContract, sd.FullName(), err)
	}
	for _, d := range reachableTypes(sd) {
		var m proto.Message
		switch d := d.(type) {
		case protoreflect.MessageDescriptor:
			m = protodesc.ToDescriptorProto(d)
		case protoreflect.EnumDescriptor:
			m = protodesc.ToEnumDescriptorProto(d)
		}
		if err := write(m); err != nil {
			return "", fmt.Errorf("%w: digest of %s: %w", ErrInvalidContract, d.FullName(), err)
		}
	}
	defs, err := Definitions(sd)
	if err != nil {
		return "", err
	}
	for _, d := range defs {
		if err := write(d); err != nil {
			return "", fmt.Errorf("%w: digest of %s: %w", ErrInvalidContract, d.GetId(), err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// reachableTypes lists every message and enum the service's methods reach through
// their inputs and outputs, ordered by full name.
func reachableTypes(sd protoreflect.ServiceDescriptor) []protoreflect.Descriptor {
	seen := map[protoreflect.FullName]protoreflect.Descriptor{}
	var visit func(md protoreflect.MessageDescriptor)
	visit = func(md protoreflect.MessageDescriptor) {
		if _, ok := seen[md.FullName()]; ok {
			return
		}
		seen[md.FullName()] = md
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if ed := fd.Enum(); ed != nil {
				seen[ed.FullName()] = ed
			}
			if m := fd.Message(); m != nil {
				visit(m)
			}
		}
	}
	methods := sd.Methods()
	for i := range methods.Len() {
		visit(methods.Get(i).Input())
		visit(methods.Get(i).Output())
	}
	out := make([]protoreflect.Descriptor, 0, len(seen))
	for _, d := range seen {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b protoreflect.Descriptor) int { return cmp.Compare(a.FullName(), b.FullName()) })
	return out
}
