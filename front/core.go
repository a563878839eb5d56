package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errCoreDown: no connection to the node's core (it is starting, or it broke).
var errCoreDown = errors.New("metaledger: the node's core is not reachable from the gRPC front")

// session is one connection to the core: a writer goroutine that sends the queued frames
// and flushes once the queue is empty (so a burst of calls is one write), and a reader
// goroutine that hands each response to the call waiting for it.
type session struct {
	conn    net.Conn
	out     chan []byte
	mu      sync.Mutex
	pending map[uint32]chan reply
	dead    chan struct{}
	once    sync.Once
}

func newSession(conn net.Conn) *session {
	s := &session{
		conn:    conn,
		out:     make(chan []byte, 4096),
		pending: make(map[uint32]chan reply),
		dead:    make(chan struct{}),
	}
	go s.write()
	go s.read()
	return s
}

// kill ends the session: every call waiting on it fails with errCoreDown.
func (s *session) kill(why error) {
	s.once.Do(func() {
		if why != nil {
			log.Printf("metaledger-front: core connection lost: %v", why)
		}
		close(s.dead)
		s.conn.Close()
	})
}

func (s *session) write() {
	w := bufio.NewWriterSize(s.conn, 256<<10)
	for {
		select {
		case f := <-s.out:
			// this frame and every one queued behind it, then one flush
			for more := true; more; {
				if _, err := w.Write(f); err != nil {
					s.kill(err)
					return
				}
				select {
				case f = <-s.out:
				default:
					more = false
				}
			}
			if err := w.Flush(); err != nil {
				s.kill(err)
				return
			}
		case <-s.dead:
			return
		}
	}
}

func (s *session) read() {
	r := bufio.NewReaderSize(s.conn, 256<<10)
	var head [4]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			s.kill(err)
			return
		}
		body := make([]byte, binary.LittleEndian.Uint32(head[:]))
		if _, err := io.ReadFull(r, body); err != nil {
			s.kill(err)
			return
		}
		id, rep, err := parseReply(body)
		if err != nil {
			s.kill(err)
			return
		}
		s.mu.Lock()
		ch := s.pending[id]
		delete(s.pending, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- rep // buffered: never blocks
		}
	}
}

// core keeps a session with the node's core, dialling again every 100 ms while it has none.
type core struct {
	addr    string
	current atomic.Value // *session, or nil while down
	nextID  uint32
}

func newCore(addr string) *core {
	c := &core{addr: addr}
	c.current.Store((*session)(nil))
	return c
}

// connect dials until it has a session or the deadline passes, then keeps one in the
// background.
func (c *core) connect(deadline time.Duration) error {
	var err error
	for start := time.Now(); time.Since(start) < deadline; time.Sleep(100 * time.Millisecond) {
		var conn net.Conn
		if conn, err = net.Dial("unix", c.addr); err == nil {
			s := newSession(conn)
			c.current.Store(s)
			go c.keep(s)
			return nil
		}
	}
	return err
}

func (c *core) keep(s *session) {
	for {
		<-s.dead
		c.current.Store((*session)(nil))
		for {
			conn, err := net.Dial("unix", c.addr)
			if err == nil {
				s = newSession(conn)
				c.current.Store(s)
				log.Printf("metaledger-front: core connection back")
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// call sends one request and waits for its response, the call's end or the session's.
func (c *core) call(ctx context.Context, method uint8, timeoutMs uint32, md []byte, peer string, payload []byte) (reply, error) {
	s, _ := c.current.Load().(*session)
	if s == nil {
		return reply{}, errCoreDown
	}
	id := atomic.AddUint32(&c.nextID, 1)
	ch := make(chan reply, 1)
	s.mu.Lock()
	s.pending[id] = ch
	s.mu.Unlock()
	frame := requestFrame(id, method, timeoutMs, md, peer, payload)
	select {
	case s.out <- frame:
	case <-s.dead:
		return reply{}, errCoreDown
	case <-ctx.Done():
		s.forget(id)
		return reply{}, ctx.Err()
	}
	select {
	case r := <-ch:
		return r, nil
	case <-s.dead:
		return reply{}, errCoreDown
	case <-ctx.Done():
		s.forget(id) // its answer, when it comes, is dropped
		return reply{}, ctx.Err()
	}
}

func (s *session) forget(id uint32) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}
