// metaledger-front: a gRPC front for one metaledger node (docs/operations.md, "The Go gRPC
// front"). It terminates the clients' HTTP/2 connections, hands the hot unary methods'
// request bytes to the node's core over a Unix socket (one frame each way, core.go and
// wire.go) and passes every other call through to the node's own gRPC server (proxy.go).
// It decodes no message: the node's core does, with the same handlers as its Python front.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

type front struct {
	fast    map[string]uint8
	core    *core
	backend *grpc.ClientConn
	// the identity key (--identity-key-stdin): when set, a call with a verified client
	// certificate carries its common name to the node (identity.go)
	key string
}

func (f *front) handle(_ interface{}, stream grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "metaledger-front: a call without a method")
	}
	if idx, ok := f.fast[method]; ok {
		return f.unary(stream, idx)
	}
	return f.proxy(stream, method)
}

// unary answers one call of a hot unary method through the core.
func (f *front) unary(stream grpc.ServerStream, method uint8) error {
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	ctx := stream.Context()
	var md []byte
	if incoming, ok := metadata.FromIncomingContext(ctx); ok {
		md = metadataBlock(incoming)
	}
	if f.key != "" {
		// a name that does not fit beside the client's metadata is left out: the call
		// then has no certificate name, and auth refuses it as any unnamed call
		cn := commonName(ctx)
		if cn != "" && len(md)+8+len(cnKey)+len(cn)+len(keyKey)+len(f.key) <= 0xFFFF {
			md = appendPair(appendPair(md, cnKey, cn), keyKey, f.key)
		}
	}
	var timeoutMs uint32
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline).Milliseconds()
		switch {
		case left < 1:
			timeoutMs = 1
		case left > math.MaxUint32:
			timeoutMs = math.MaxUint32
		default:
			timeoutMs = uint32(left)
		}
	}
	rep, err := f.core.call(ctx, method, timeoutMs, md, peerName(ctx), req)
	if err != nil {
		if err == errCoreDown {
			return status.Error(codes.Unavailable, err.Error())
		}
		return status.FromContextError(err).Err()
	}
	if len(rep.trailers) > 0 {
		stream.SetTrailer(rep.trailers)
	}
	if rep.code != 0 {
		return status.Error(codes.Code(rep.code), rep.details)
	}
	return stream.SendMsg(&rep.payload)
}

// peerName names the client as grpc's Python server does: "ipv4:127.0.0.1:54321".
func peerName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	addr := p.Addr.String()
	if tcp, ok := p.Addr.(*net.TCPAddr); ok && tcp.IP.To4() == nil {
		return "ipv6:" + addr
	}
	return "ipv4:" + addr
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "metaledger-front: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	listen := flag.String("listen", "", "HOST:PORT the clients call")
	coreAddr := flag.String("core", "", "the node core's Unix socket (@name: abstract)")
	backendAddr := flag.String("backend", "", "the node's own gRPC server: HOST:PORT, or @name (abstract Unix socket)")
	fastList := flag.String("fast", "", "comma-separated /service/method paths the core answers")
	maxMsg := flag.Int("max-msg-bytes", 4<<20, "largest message either way")
	var files tlsFiles
	flag.StringVar(&files.cert, "cert-file", "", "TLS certificate of the client port (PEM)")
	flag.StringVar(&files.key, "key-file", "", "its private key (PEM)")
	flag.StringVar(&files.ca, "trusted-ca-file", "", "CA that client certificates are checked against")
	flag.BoolVar(&files.clientCertAuth, "client-cert-auth", false, "require a client certificate the CA signed")
	keyOnStdin := flag.Bool("identity-key-stdin", false,
		"read the identity key from stdin's first line; calls then carry their client certificate's common name")
	flag.Parse()
	if *listen == "" || *coreAddr == "" || *backendAddr == "" {
		fail("--listen, --core and --backend are required")
	}
	log.SetFlags(0)
	stdin := bufio.NewReader(os.Stdin)
	key := ""
	if *keyOnStdin {
		var err error
		if key, err = readKey(stdin); err != nil {
			fail("%v", err)
		}
	}
	serverOpts := []grpc.ServerOption{}
	if files.cert != "" || files.key != "" {
		creds, err := files.credentials()
		if err != nil {
			fail("%v", err)
		}
		serverOpts = append(serverOpts, grpc.Creds(creds))
	}
	fast := map[string]uint8{}
	for i, m := range strings.Split(*fastList, ",") {
		if m == "" {
			continue
		}
		if i > 255 {
			fail("--fast: at most 256 methods")
		}
		fast[m] = uint8(i)
	}
	c := newCore(*coreAddr)
	if err := c.connect(5 * time.Second); err != nil {
		fail("cannot reach the core at %s: %v", *coreAddr, err)
	}
	dial := []grpc.DialOption{grpc.WithInsecure(),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}),
			grpc.MaxCallRecvMsgSize(*maxMsg), grpc.MaxCallSendMsgSize(*maxMsg))}
	target := *backendAddr
	if strings.HasPrefix(target, "@") {
		// an abstract Unix socket (the node's usual backend): no TCP port to collide with
		// the client port the front is about to listen on
		name := target
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", name)
		}))
		target = "passthrough:///metaledger-backend"
	}
	backend, err := grpc.Dial(target, dial...)
	if err != nil {
		fail("--backend %s: %v", *backendAddr, err)
	}
	f := &front{fast: fast, core: c, backend: backend, key: key}
	server := grpc.NewServer(append(serverOpts,
		grpc.CustomCodec(rawCodec{}),
		grpc.UnknownServiceHandler(f.handle),
		grpc.MaxRecvMsgSize(*maxMsg),
		grpc.MaxSendMsgSize(*maxMsg),
		// clients ping every few seconds while a call is open (etcd's clients, ours): allowed,
		// as etcd and the node's Python front allow
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: 4 * time.Second, PermitWithoutStream: true,
		}),
	)...)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fail("cannot listen on %s: %v", *listen, err)
	}
	fmt.Printf("listening %s\n", l.Addr())
	go stopWhenOrphaned(server, stdin)
	go stopOnSignal(server)
	if err := server.Serve(l); err != nil {
		fail("serving %s: %v", *listen, err)
	}
}

// stopWhenOrphaned: the node holds our stdin open; its end (the node died) ends us.
func stopWhenOrphaned(server *grpc.Server, stdin *bufio.Reader) {
	_, _ = io.Copy(io.Discard, stdin)
	server.Stop()
	os.Exit(0)
}

// stopOnSignal: SIGTERM or SIGINT stops accepting, gives calls in flight 1 s, then exits.
func stopOnSignal(server *grpc.Server) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
	done := make(chan struct{})
	go func() { server.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		server.Stop()
	}
	os.Exit(0)
}
