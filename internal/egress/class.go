package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Class is the kind of a failed outbound request. It holds no text from
// the remote side, so it may be shown to the caller that asked for the
// request.
type Class string

// The classes [Classify] returns, and those of answers with a status
// outside 2xx ([StatusClass]).
const (
	// ClassBlocked: the address is in a denied range and not allowlisted.
	ClassBlocked Class = "blocked"
	// ClassDNS: the host name did not resolve.
	ClassDNS Class = "dns"
	// ClassRefused: the receiver refused the connection.
	ClassRefused Class = "refused"
	// ClassUnreachable: no route to the receiver.
	ClassUnreachable Class = "unreachable"
	// ClassTimeout: no answer in time, connecting or waiting.
	ClassTimeout Class = "timeout"
	// ClassTLS: the TLS handshake failed (an untrusted certificate, say).
	ClassTLS Class = "tls"
	// ClassClosed: the receiver closed or reset the connection before it
	// answered.
	ClassClosed Class = "closed"
	// ClassProtocol: the receiver answered, but not in HTTP.
	ClassProtocol Class = "protocol"
	// ClassCanceled: the request was canceled before it ended.
	ClassCanceled Class = "canceled"
	// ClassFailed: any other failure.
	ClassFailed Class = "failed"
)

var classes = map[Class]bool{
	ClassBlocked: true, ClassDNS: true, ClassRefused: true, ClassUnreachable: true, ClassTimeout: true,
	ClassTLS: true, ClassClosed: true, ClassProtocol: true, ClassCanceled: true, ClassFailed: true,
}

// StatusClass is the class of an answer with status code, such as
// "status 503".
func StatusClass(code int) Class { return Class("status " + strconv.Itoa(code)) }

// Valid reports whether c is one of the classes above or a [StatusClass],
// so that text of another origin can be told from a class.
func (c Class) Valid() bool {
	if classes[c] {
		return true
	}
	n, ok := strings.CutPrefix(string(c), "status ")
	if !ok || len(n) != 3 {
		return false
	}
	code, err := strconv.Atoi(n)
	return err == nil && code >= 100 && code <= 999
}

// Describe says what c means in a few words fit for an error message, such
// as "the connection was refused" or "the answer had status 503".
func (c Class) Describe() string {
	switch c {
	case ClassBlocked:
		return "the address is not allowed"
	case ClassDNS:
		return "the host name did not resolve"
	case ClassRefused:
		return "the connection was refused"
	case ClassUnreachable:
		return "there is no route to the host"
	case ClassTimeout:
		return "there was no answer in time"
	case ClassTLS:
		return "the TLS handshake failed"
	case ClassClosed:
		return "the connection was closed without an answer"
	case ClassProtocol:
		return "the answer was not HTTP"
	case ClassCanceled:
		return "the request was canceled"
	}
	if n, ok := strings.CutPrefix(string(c), "status "); ok && c.Valid() {
		return "the answer had status " + n
	}
	return "the request failed"
}

// Error is an outbound request that failed, with its class. Its text holds
// the cause, which may quote the remote side: log it for the operator, and
// show a caller only Class.
type Error struct {
	Class Class
	Err   error
}

func (e *Error) Error() string { return "egress: " + string(e.Class) + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// BlockedError is a connection refused because an address of its host is
// in a denied [Range] and the allowlist does not admit it.
type BlockedError struct {
	// Host is the host as asked: a name or an address.
	Host string
	// Addr is the address refused.
	Addr  netip.Addr
	Range Range
}

func (e *BlockedError) Error() string {
	if e.literal() {
		return fmt.Sprintf("egress: %s is %s, which is not allowed", e.Host, e.article())
	}
	return fmt.Sprintf("egress: %s resolves to %s, %s, which is not allowed", e.Host, e.Addr, e.article())
}

// Reason says what was refused in words fit for the caller that asked.
// An address the caller wrote is named with its range ("127.0.0.1 is a
// loopback address (127.0.0.0/8)"): the caller knows it already. Of a
// name only the rule is told ("db.internal is not a public host"), the
// same words a name that does not resolve gets ([NameRule]): whether a
// name resolves inside, and to which range, is the operator's network's
// business, and belongs in the operator's log ([BlockedError.Error]).
func (e *BlockedError) Reason() string {
	if e.literal() {
		return fmt.Sprintf("%s is %s", e.Host, e.article())
	}
	return NameRule(e.Host)
}

// NameRule is what a caller is told of a host name that an outbound
// request may not reach, whether it resolves to a refused address or does
// not resolve at all, so that the answer tells an outsider nothing about
// the names of the operator's network.
func NameRule(host string) string {
	return host + " is not a public host"
}

// CallerRange returns the kind of the range refused, for the caller's
// error data, or "" when e's host is a name (the caller is not told what
// it resolves to).
func (e *BlockedError) CallerRange() string {
	if e.literal() {
		return e.Range.Kind
	}
	return ""
}

func (e *BlockedError) literal() bool {
	_, err := netip.ParseAddr(e.Host)
	return err == nil
}

func (e *BlockedError) article() string {
	return fmt.Sprintf("%s address (%s)", an(e.Range.Kind), e.Range.Prefix)
}

// an puts "a" or "an" before kind.
func an(kind string) string {
	if strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// Classify returns the class of err, an error of a request made with a
// [Guard]'s client or of reading its answer. It returns "" for nil.
func Classify(err error) Class {
	if err == nil {
		return ""
	}
	var blocked *BlockedError
	if errors.As(err, &blocked) {
		return ClassBlocked
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return classify(err, false)
}

// classify classes err; connected says that a connection to the receiver
// was open, so that a failure it does not otherwise know is the answer's.
func classify(err error, connected bool) Class {
	var blocked *BlockedError
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &blocked):
		return ClassBlocked
	case errors.As(err, &dnsErr):
		return ClassDNS
	case isTLS(err):
		return ClassTLS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return ClassTimeout
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassRefused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return ClassUnreachable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ClassClosed
	case connected:
		return ClassProtocol
	}
	return ClassFailed
}

func isTLS(err error) bool {
	var (
		record  tls.RecordHeaderError
		alert   tls.AlertError
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	return errors.As(err, &record) || errors.As(err, &alert) || errors.As(err, &verify) ||
		errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}
