package main

// rawCodec passes messages through as the bytes they are: the front never decodes a
// request or a response, the node's core does.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	// gRPC reuses its receive buffer after Unmarshal returns: keep a copy
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

// Name is "proto": clients send application/grpc (+proto), and the bytes are protobuf.
func (rawCodec) Name() string { return "proto" }

func (rawCodec) String() string { return "proto" }
