package main

import (
	"encoding/binary"
	"errors"
	"strings"

	"google.golang.org/grpc/metadata"
)

// The core socket's frames (docs/operations.md, "The Go gRPC front"; all integers
// little-endian).
//
// request, front -> core: u32 body_len | u32 call_id | u8 method | u32 timeout_ms |
//   u16 metadata_len, metadata (u16 klen, key, u16 vlen, value)* | u16 peer_len, peer | payload
// response, core -> front: u32 body_len | u32 call_id | u8 code |
//   u16 details_len, details | u16 trailers_len, trailers (u16 klen, key, u16 vlen, value)* |
//   payload

// passed reports whether a call's metadata key goes to the core: not the transport's own
// headers (pseudo-headers, content-type, user-agent, te, grpc-*), which grpc.aio does not
// hand its handlers either.
func passed(key string) bool {
	if strings.HasPrefix(key, ":") || strings.HasPrefix(key, "grpc-") {
		return false
	}
	if strings.HasPrefix(key, identityPrefix) { // only this front says who a client is
		return false
	}
	return key != "content-type" && key != "user-agent" && key != "te"
}

// metadataBlock is the call's metadata as (u16 klen, key, u16 vlen, value) pairs, at most
// 64 KiB of them (what does not fit is left out: an oversized token fails auth as any bad
// token does).
func metadataBlock(md metadata.MD) []byte {
	var b []byte
	for k, vs := range md {
		if !passed(k) || len(k) > 0xFFFF {
			continue
		}
		for _, v := range vs {
			if len(v) > 0xFFFF || len(b)+4+len(k)+len(v) > 0xFFFF {
				continue
			}
			b = appendPair(b, k, v)
		}
	}
	return b
}

// appendPair adds one (key, value) pair to a metadata block (the caller checked it fits).
func appendPair(b []byte, k, v string) []byte {
	le := binary.LittleEndian
	b = le.AppendUint16(b, uint16(len(k)))
	b = append(b, k...)
	b = le.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

// requestFrame encodes one request, length prefix included, in one allocation.
func requestFrame(id uint32, method uint8, timeoutMs uint32, md []byte, peer string, payload []byte) []byte {
	if len(peer) > 0xFFFF {
		peer = peer[:0xFFFF]
	}
	body := 4 + 1 + 4 + 2 + len(md) + 2 + len(peer) + len(payload)
	b := make([]byte, 4+body)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(body))
	le.PutUint32(b[4:], id)
	b[8] = method
	le.PutUint32(b[9:], timeoutMs)
	le.PutUint16(b[13:], uint16(len(md)))
	i := 15 + copy(b[15:], md)
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
