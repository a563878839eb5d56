package main

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// everyway: a stream open both ways, which carries a unary call as well as any stream.
var everyway = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// proxy passes a call the front does not answer through to the node's own gRPC server:
// its metadata (but the transport's own headers), its deadline, every message both ways,
// the backend's headers, status and trailers.
func (f *front) proxy(stream grpc.ServerStream, method string) error {
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range md {
		if passed(k) {
			out[k] = v
		}
	}
	if f.key != "" {
		if cn := commonName(ctx); cn != "" {
			out.Set(cnKey, cn)
			out.Set(keyKey, f.key)
		}
	}
	octx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, out))
	defer cancel()
	backend, err := f.backend.NewStream(octx, everyway, method)
	if err != nil {
		return err
	}
	go func() {
		for {
			var m []byte
			if err := stream.RecvMsg(&m); err != nil {
				if err == io.EOF {
					backend.CloseSend()
				} else {
					cancel() // the client is gone: so is the backend's call
				}
				return
			}
			if err := backend.SendMsg(&m); err != nil {
				return // the backend's side ended: its status comes from RecvMsg below
			}
		}
	}()
	headerSent := false
	for {
		var m []byte
		err := backend.RecvMsg(&m)
		if !headerSent {
			headerSent = true
			if h, herr := backend.Header(); herr == nil && len(h) > 0 {
				if serr := stream.SendHeader(h); serr != nil {
					return serr
				}
			}
		}
		if err != nil {
			stream.SetTrailer(backend.Trailer())
			if err == io.EOF {
				return nil
			}
			return err // a status error: the client gets the backend's code and message
		}
		if err := stream.SendMsg(&m); err != nil {
			return err
		}
	}
}
