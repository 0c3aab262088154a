package webhook

import (
	"bytes"
	"errors"
	"io"
)

// A body is charged and read in pieces: the first of firstPiece bytes once its first byte has
// arrived (a connection that sends headers only holds nothing), each next one twice as large,
// up to maxPiece. A client trickling a body holds at most twice what it has sent, plus a
// first piece; a single Widget's review arrives in one or two pieces.
const (
	firstPiece = 4 << 10
	maxPiece   = 64 << 10
)

// errBudgetRefused says the budget refused a piece (the 503 has been written).
var errBudgetRefused = errors.New("the in-flight budget refused the request")

// arrivedBody is a request body read ahead of its handler, piece by piece as each was charged.
type arrivedBody struct {
	chunks [][]byte
	n      int64
	// cut is set when a body of undeclared length went past the handler's limit: the rest is
	// left in the request, for the handler to refuse.
	cut bool
}

// readArriving reads a body declared to be declared bytes long (-1: unknown) in pieces,
// charging each through grow before reading it; a body of unknown length is read up to one
// byte over maxBody.
func readArriving(body io.Reader, declared, maxBody int64, grow func(int64) bool) (*arrivedBody, error) {
	a := &arrivedBody{}
	limit := declared
	if limit < 0 {
		limit = maxBody + 1
	}
	if limit == 0 {
		return a, nil
	}
	// Wait for the first byte before charging anything.
	var first [1]byte
	if _, err := io.ReadFull(body, first[:]); err != nil {
		if declared < 0 && errors.Is(err, io.EOF) {
			return a, nil
		}
		return nil, unexpected(err)
	}
	next := int64(firstPiece)
	for a.n < limit {
		piece := min(next, limit-a.n)
		next = min(next*2, maxPiece)
		if !grow(piece) {
			return nil, errBudgetRefused
		}
		buf := make([]byte, piece)
		from := 0
		if a.n == 0 {
			buf[0], from = first[0], 1
		}
		read, err := io.ReadFull(body, buf[from:])
		read += from
		a.n += int64(read)
		if read > 0 {
			a.chunks = append(a.chunks, buf[:read])
		}
		switch {
		case err == nil:
		case declared < 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
			return a, nil
		default:
			return nil, unexpected(err)
		}
	}
	a.cut = declared < 0
	return a, nil
}

// unexpected is a read error of a body shorter than declared.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// assemble returns the body for the handler: one buffer (ArrivedBody) once its pieces are
// copied into it and dropped, or, when it was cut short, what arrived followed by the rest.
func (a *arrivedBody) assemble(rest io.ReadCloser) io.ReadCloser {
	if a.cut {
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(bytes.Join(a.chunks, nil)), rest), rest}
	}
	whole := bytes.Join(a.chunks, nil)
	if len(a.chunks) == 1 {
		whole = a.chunks[0]
	}
	a.chunks = nil
	return &ArrivedBody{Reader: bytes.NewReader(whole), whole: whole, Closer: rest}
}

// ArrivedBody is a request body the in-flight budget has read whole and charged; handlers
// take its bytes rather than reading them into a second buffer.
type ArrivedBody struct {
	*bytes.Reader
	io.Closer
	whole []byte
}

// Bytes is the whole body.
func (b *ArrivedBody) Bytes() []byte { return b.whole }
