package logrepl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Defaults for Config fields left zero.
const (
	DefaultPublication    = "syncpipe"
	DefaultStatusInterval = 10 * time.Second
	DefaultReceiveTimeout = 30 * time.Second
	DefaultBufferBytes    = 8 << 20
)

// entryDepth is how many hand-overs the reader may queue ahead of Next.
const entryDepth = 4

// retryDelay is how soon the reader retries a hand-over that found the
// queue full while it still had room to keep reading.
const retryDelay = 5 * time.Millisecond

// Config configures a Stream.
type Config struct {
	// Slot is the replication slot to stream from (see CreateSlot).
	Slot string
	// Publication names the tables to stream; default DefaultPublication.
	Publication string
	// StartLSN is the durable position to resume from: the last EndLSN the
	// caller acknowledged and stored, or the slot's consistent point. Zero
	// resumes from the slot's confirmed_flush_lsn. Transactions that
	// committed before it are never delivered. A StartLSN behind the slot's
	// confirmed_flush_lsn is ErrSlotAhead (those changes are gone).
	StartLSN LSN
	// StatusInterval is how often a standby status update reports the
	// acknowledged position; default DefaultStatusInterval.
	StatusInterval time.Duration
	// ReceiveTimeout turns a silent connection into ErrReceiveTimeout;
	// default DefaultReceiveTimeout. It is capped at 3/4 of the server's
	// wal_sender_timeout and must exceed StatusInterval (every status update
	// asks the server for a reply, so a live connection is never silent for
	// longer than StatusInterval).
	ReceiveTimeout time.Duration
	// BufferBytes bounds the decoded data the reader collects ahead of Next
	// before it stops reading from the socket; default DefaultBufferBytes.
	// Peak memory is about (4+1) × BufferBytes plus one batch.
	BufferBytes int
	// Relations seeds the relation cache, e.g. with the shapes the snapshot
	// used, so that a schema change made while syncpipe was not streaming
	// still surfaces as RelationChanged. Optional.
	Relations []*Relation
	// OnStatus, if set, is called after each standby status update was
	// written, with the position reported as flushed: from the reader
	// goroutine, and for the final update from Close. It must return quickly.
	OnStatus func(flushed LSN)

	segmentChanges int // tests: smaller hand-over segments
}

// Validate returns every problem of c (nil when usable), after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := ValidateSlotName(c.Slot); err != nil {
		errs = append(errs, fmt.Errorf("slot: %w", err))
	}
	if strings.ContainsRune(c.Publication, 0) {
		errs = append(errs, errors.New("publication: must not contain NUL"))
	}
	if c.StatusInterval < 0 || c.ReceiveTimeout < 0 || c.BufferBytes < 0 {
		errs = append(errs, errors.New("status_interval, receive_timeout and buffer_bytes must not be negative"))
	}
	if c.ReceiveTimeout <= c.StatusInterval {
		errs = append(errs, fmt.Errorf("receive_timeout (%s) must be longer than status_interval (%s)", c.ReceiveTimeout, c.StatusInterval))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.ReceiveTimeout == 0 {
		c.ReceiveTimeout = DefaultReceiveTimeout
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	return c
}

// Stream reads one replication slot. Start it with Start; then one
// goroutine calls Next in a loop, any goroutine calls Ack when a batch is
// durable, and Close ends it. Internally a reader goroutine owns the
// connection: it decodes ahead of Next (bounded by BufferBytes), answers the
// server's keepalives and sends standby status updates on time even while
// the caller is busy flushing.
type Stream struct {
	cfg            Config
	conn           *pgconn.PgConn
	receiveTimeout time.Duration
	statusInterval time.Duration

	ctx    context.Context // reader lifetime, cancelled by Close
	cancel context.CancelFunc
	recv   *recvDeadline   // bounds the reader's receives; Close stops it
	batch  *batchingReader // batches the reads of a busy stream; may be nil
	done   chan struct{}   // closed when the reader has exited
	err    error           // reader's exit error, readable after done

	entries chan []segment

	acked        atomic.Uint64 // durable position reported as flushed
	deliveredMax atomic.Uint64 // highest EndLSN Next returned (or the start)

	// reader-only state
	dec      *decoder
	replyNow bool

	// Next-only state
	leftover  []segment // segments taken from entries, not yet consumed
	cur       *Txn      // transaction being collected (changes not yet delivered)
	pending   Batch     // collected by a Next whose ctx ended
	delivered LSN       // highest EndLSN returned

	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Start checks the source (slot exists, is not in use, lost or ahead of
// StartLSN; publication exists; session TimeZone is UTC), sends
// START_REPLICATION on conn and starts the reader goroutine. conn is a
// replication connection (see Connect) that has not streamed before; it
// belongs to the Stream until Close returns. ctx bounds the start only; the
// stream lives until Close.
func Start(ctx context.Context, conn *pgconn.PgConn, cfg Config) (*Stream, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("replication stream config: %w", err)
	}
	slot, err := LookupSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return nil, err
	}
	if err := slot.usable(); err != nil {
		return nil, err
	}
	if slot.ActivePID != 0 {
		return nil, errSlotInUse(cfg.Slot, strconv.Itoa(slot.ActivePID), nil)
	}
	if cfg.StartLSN != 0 && cfg.StartLSN < slot.ConfirmedFlushLSN {
		return nil, newError(ErrSlotAhead, nil,
			"replication slot %s already confirmed %s, past the stored resume position %s: the changes in between are gone; syncpipe will start a new replication group",
			cfg.Slot, slot.ConfirmedFlushLSN, cfg.StartLSN)
	}
	if err := checkPublication(ctx, conn, cfg.Publication, cfg.Relations); err != nil {
		return nil, err
	}
	if err := ensureUTC(ctx, conn); err != nil {
		return nil, err
	}
	receiveTimeout, err := capReceiveTimeout(ctx, conn, cfg.ReceiveTimeout)
	if err != nil {
		return nil, err
	}
	statusInterval := min(cfg.StatusInterval, receiveTimeout/2)

	start := max(cfg.StartLSN, slot.ConfirmedFlushLSN)
	err = pglogrepl.StartReplication(ctx, conn, cfg.Slot, start, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names " + quoteLiteral(quoteIdent(cfg.Publication)),
			"messages 'true'",
		},
	})
	if err != nil {
		if c := classify(err, cfg.Slot, cfg.Publication, cfg.Relations); c != err {
			return nil, c
		}
		return nil, fmt.Errorf("start replication from slot %s at %s: %w", cfg.Slot, start, err)
	}
	s := &Stream{
		cfg:            cfg,
		conn:           conn,
		receiveTimeout: receiveTimeout,
		statusInterval: statusInterval,
		done:           make(chan struct{}),
		entries:        make(chan []segment, entryDepth),
		dec:            newDecoder(start, cfg.Relations),
		delivered:      start,
		recv:           &recvDeadline{conn: conn.Conn()},
		batch:          batchingFor(conn),
	}
	if cfg.segmentChanges > 0 {
		s.dec.segChanges = cfg.segmentChanges
	}
	s.acked.Store(uint64(start))
	s.deliveredMax.Store(uint64(start))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.batch != nil {
		s.batch.start(conn.Conn())
	}
	go s.run()
	return s, nil
}

// ensureUTC makes the walsender print timestamptz in UTC: Connect sets it at
// startup; a connection made otherwise gets a SET.
func ensureUTC(ctx context.Context, conn *pgconn.PgConn) error {
	tz, err := showSetting(ctx, conn, "TimeZone")
	if err != nil {
		return err
	}
	if tz == "UTC" || tz == "Etc/UTC" {
		return nil
	}
	if _, err := simpleQuery(ctx, conn, "SET TimeZone TO 'UTC'"); err != nil {
		return fmt.Errorf("set the replication session's TimeZone to UTC (or connect with Connect): %w", err)
	}
	return nil
}

// capReceiveTimeout keeps the receive deadline below the server's
// wal_sender_timeout (at 3/4 of it), so a dead connection is noticed here
// first.
func capReceiveTimeout(ctx context.Context, conn *pgconn.PgConn, d time.Duration) (time.Duration, error) {
	rows, err := simpleQuery(ctx, conn, "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'wal_sender_timeout'")
	if err != nil {
		return 0, fmt.Errorf("read wal_sender_timeout: %w", err)
	}
	if len(rows) == 1 && len(rows[0]) == 1 {
		if ms, err := strconv.Atoi(string(rows[0][0])); err == nil && ms > 0 {
			d = min(d, time.Duration(ms)*time.Millisecond*3/4)
		}
	}
	return d, nil
}

// Ack records that everything up to lsn is durable. Call it, from any
// goroutine, with a Batch.EndLSN once that batch and all batches before it
// are durably stored. Acknowledgements are monotonic (a lower lsn is
// ignored) and capped at the highest EndLSN Next has returned. Only
// acknowledged positions are ever reported to the server as flushed: at the
// next status update, and in the final one Close sends.
func (s *Stream) Ack(lsn LSN) {
	lsn = min(lsn, LSN(s.deliveredMax.Load()))
	for {
		cur := s.acked.Load()
		if uint64(lsn) <= cur || s.acked.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

// Acked returns the acknowledged position (initially the start position).
func (s *Stream) Acked() LSN { return LSN(s.acked.Load()) }

// Close stops the reader, sends a final standby status update with the
// acknowledged position and ends the COPY, leaving conn idle for commands
// such as LookupSlot or DropSlot. ctx bounds that exchange. If the stream
// had failed (Next returned an error) Close only stops the reader: the
// connection's state is unknown, so close it. Either way conn cannot stream
// again — PostgreSQL's walsender does not restart logical streaming on a
// connection that streamed before — so Start anew on a new connection, from
// the durable position. Close may be called from any goroutine, also while
// Next blocks (Next then returns ErrClosed); later calls return the first
// result. If it returns an error, close conn.
func (s *Stream) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.cancel()
		s.recv.stop()
		<-s.done
		s.closeErr = s.finish(ctx)
	})
	return s.closeErr
}

// finish runs after the reader exited, so it owns the connection.
func (s *Stream) finish(ctx context.Context) error {
	if s.err != nil || s.conn.IsClosed() {
		return nil // the stream failed and Next reported why
	}
	if err := s.sendStatus(false); err != nil {
		return err
	}
	s.conn.Frontend().Send(&pgproto3.CopyDone{})
	if err := s.conn.Frontend().Flush(); err != nil {
		return fmt.Errorf("end replication: %w", err)
	}
	for {
		msg, err := s.conn.ReceiveMessage(ctx)
		if err != nil {
			return fmt.Errorf("end replication: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			return nil
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("end replication: %w", pgconn.ErrorResponseToPgError(m))
		}
	}
}

// sendStatus reports the acknowledged position as written, flushed and
// applied. With askReply the server answers with a keepalive, which keeps a
// healthy connection from ever looking silent.
func (s *Stream) sendStatus(askReply bool) error {
	lsn := LSN(s.acked.Load())
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn, ReplyRequested: askReply,
	})
	if err != nil {
		return fmt.Errorf("send standby status update for slot %s: %w", s.cfg.Slot, err)
	}
	if s.cfg.OnStatus != nil {
		s.cfg.OnStatus(lsn)
	}
	return nil
}

// run is the reader goroutine.
func (s *Stream) run() {
	defer close(s.done)
	s.err = s.loop()
	if s.batch != nil {
		s.batch.stop() // Close's exchange and later commands read small replies
	}
	s.recv.release()
}

func (s *Stream) loop() error {
	lastRecv := time.Now()
	nextStatus := lastRecv // report the start position at once
	for s.ctx.Err() == nil {
		now := time.Now()
		if s.replyNow || !now.Before(nextStatus) {
			if err := s.sendStatus(true); err != nil {
				return err
			}
			s.replyNow, nextStatus = false, now.Add(s.statusInterval)
		}
		if len(s.dec.out) > 0 {
			resumed, err := s.handOff(&nextStatus)
			if err != nil {
				return err
			}
			if resumed {
				lastRecv = time.Now() // we were not reading: the silence was ours
			}
		}
		wake := earliest(nextStatus, lastRecv.Add(s.receiveTimeout))
		if len(s.dec.out) > 0 {
			wake = earliest(wake, time.Now().Add(retryDelay))
		}
		if s.batch != nil && s.batch.busy.Load() {
			wake = earliest(wake, time.Now().Add(lowatTick)) // what came short of lowatBytes
		}
		if ok, err := s.recv.arm(wake); !ok {
			return nil // Close
		} else if err != nil {
			return fmt.Errorf("receive from replication slot %s: set deadline: %w", s.cfg.Slot, err)
		}
		// No context: the deadline bounds the receive (see recvDeadline).
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if s.ctx.Err() != nil {
				return nil // Close
			}
			if pgconn.Timeout(err) {
				if time.Since(lastRecv) >= s.receiveTimeout {
					return &Error{Kind: ErrReceiveTimeout, Err: err, Msg: fmt.Sprintf(
						"no data from the source for %s: reconnecting", s.receiveTimeout.Round(time.Millisecond))}
				}
				continue
			}
			if c := classify(err, s.cfg.Slot, s.cfg.Publication, s.cfg.Relations); c != err {
				return c
			}
			return fmt.Errorf("receive from replication slot %s: %w", s.cfg.Slot, err)
		}
		lastRecv = time.Now()
		if err := s.handle(msg); err != nil {
			return err
		}
	}
	return nil
}

// handle processes one backend message of the COPY stream.
func (s *Stream) handle(msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return protocolError("empty CopyData")
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return protocolError("keepalive: %v", err)
			}
			if k.ReplyRequested {
				s.replyNow = true
			}
			// Outside a transaction everything before the server's WAL end
			// has been sent to us, so it may be acknowledged once what came
			// before is durable. A server that asks for a reply waits for
			// that acknowledgement: a shutting-down server waits for its
			// walsenders' clients to confirm its WAL end.
			s.dec.position(k.ServerWALEnd, k.ReplyRequested)
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return protocolError("XLogData: %v", err)
			}
			if len(x.WALData) == 0 {
				return protocolError("XLogData without a message")
			}
			return s.dec.message(x.WALStart, x.WALData)
		}
	case *pgproto3.ErrorResponse:
		err := pgconn.ErrorResponseToPgError(m)
		if c := classify(err, s.cfg.Slot, s.cfg.Publication, s.cfg.Relations); c != error(err) {
			return c
		}
		return fmt.Errorf("replication slot %s: %w", s.cfg.Slot, err)
	case *pgproto3.CopyDone:
		return fmt.Errorf("replication slot %s: the server ended the stream (shutdown or failover?): reconnecting", s.cfg.Slot)
	}
	return nil
}

// handOff passes decoded segments to Next. If the queue is full it keeps
// them and returns (the reader keeps reading) until BufferBytes are held;
// then it waits for Next, still sending status updates on time. resumed
// reports that it had to wait.
func (s *Stream) handOff(nextStatus *time.Time) (resumed bool, err error) {
	select {
	case s.entries <- s.dec.out:
		s.dec.takeOut()
		return false, nil
	default:
	}
	if s.dec.outBytes < s.cfg.BufferBytes {
		return false, nil
	}
	for {
		t := time.NewTimer(time.Until(*nextStatus))
		select {
		case s.entries <- s.dec.out:
			t.Stop()
			s.dec.takeOut()
			return true, nil
		case <-t.C:
			if err := s.sendStatus(true); err != nil {
				return true, err
			}
			*nextStatus = time.Now().Add(s.statusInterval)
		case <-s.ctx.Done():
			t.Stop()
			return true, nil
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
