package main

import (
	"encoding/binary"
	"errors"

	"google.golang.org/grpc/metadata"
)

// The core socket's frames (docs/operations.md, "The Go gRPC front"; all integers
// little-endian).
//
// request, front -> core: u32 body_len | u32 call_id | u8 method | u32 timeout_ms |
//   u16 token_len, token | u16 peer_len, peer | payload
// response, core -> front: u32 body_len | u32 call_id | u8 code |
//   u16 details_len, details | u16 trailers_len, trailers (u16 klen, key, u16 vlen, value)* |
//   payload

// requestFrame encodes one request, length prefix included, in one allocation.
func requestFrame(id uint32, method uint8, timeoutMs uint32, token, peer string, payload []byte) []byte {
	if len(token) > 0xFFFF {
		token = token[:0xFFFF] // refused by the core's auth check as any bad token is
	}
	if len(peer) > 0xFFFF {
		peer = peer[:0xFFFF]
	}
	body := 4 + 1 + 4 + 2 + len(token) + 2 + len(peer) + len(payload)
	b := make([]byte, 4+body)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(body))
	le.PutUint32(b[4:], id)
	b[8] = method
	le.PutUint32(b[9:], timeoutMs)
	le.PutUint16(b[13:], uint16(len(token)))
	i := 15 + copy(b[15:], token)
	le.PutUint16(b[i:], uint16(len(peer)))
	i += 2
	i += copy(b[i:], peer)
	copy(b[i:], payload)
	return b
}

type reply struct {
	code     uint8
	details  string
	trailers metadata.MD
	payload  []byte
}

var errMalformed = errors.New("malformed response frame")

// parseReply decodes a response body (the bytes after its length prefix).
func parseReply(body []byte) (uint32, reply, error) {
	var r reply
	le := binary.LittleEndian
	if len(body) < 4+1+2 {
		return 0, r, errMalformed
	}
	id := le.Uint32(body)
	r.code = body[4]
	i := 5
	dlen := int(le.Uint16(body[i:]))
	i += 2
	if len(body) < i+dlen+2 {
		return 0, r, errMalformed
	}
	r.details = string(body[i : i+dlen])
	i += dlen
	tlen := int(le.Uint16(body[i:]))
	i += 2
	if len(body) < i+tlen {
		return 0, r, errMalformed
	}
	trailers := body[i : i+tlen]
	i += tlen
	for len(trailers) > 0 {
		if len(trailers) < 2 {
			return 0, r, errMalformed
		}
		kl := int(le.Uint16(trailers))
		if len(trailers) < 2+kl+2 {
			return 0, r, errMalformed
		}
		key := string(trailers[2 : 2+kl])
		vl := int(le.Uint16(trailers[2+kl:]))
		if len(trailers) < 4+kl+vl {
			return 0, r, errMalformed
		}
		if r.trailers == nil {
			r.trailers = metadata.MD{}
		}
		r.trailers.Append(key, string(trailers[4+kl:4+kl+vl]))
		trailers = trailers[4+kl+vl:]
	}
	r.payload = body[i:]
	return id, r, nil
}
