package schema_test

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

func newMessage(md protoreflect.MessageDescriptor) proto.Message { return dynamicpb.NewMessage(md) }
