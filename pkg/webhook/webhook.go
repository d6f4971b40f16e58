package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of a signed request.
const (
	// HeaderID carries the delivery's id, the same on every attempt.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the attempt's time in unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries one "v1,<signature>" per signing secret,
	// space-separated.
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret.
const SecretPrefix = "whsec_"

// SecretBytes is the size of the key of a secret made by [NewSecret].
const SecretBytes = 32

// ErrSecret reports a secret that is not "whsec_" and the base64 of 24 to 64 bytes.
var ErrSecret = errors.New("webhook: a secret is " + SecretPrefix + " and the base64 of 24 to 64 bytes")

// NewSecret returns a new random secret, "whsec_" and the base64 of
// [SecretBytes] bytes.
func NewSecret() string {
	b := make([]byte, SecretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ParseSecret returns the key of a secret, or [ErrSecret].
func ParseSecret(secret string) ([]byte, error) {
	s, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) < 24 || len(key) > 64 {
		return nil, ErrSecret
	}
	return key, nil
}

// Sign returns the webhook-signature header value of a request: one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, in order,
// space-separated. An invalid secret is an error (which never shows it).
func Sign(secrets []string, id string, at time.Time, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", errors.New("webhook: no secret to sign with")
	}
	sigs := make([]string, 0, len(secrets))
	for i, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return "", fmt.Errorf("webhook: secret %d: %w", i+1, err)
		}
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac(key, id, at.Unix(), body)))
	}
	return strings.Join(sigs, " "), nil
}

func mac(key []byte, id string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// SetHeaders signs a request's body and sets its three headers.
func SetHeaders(h http.Header, secrets []string, id string, at time.Time, body []byte) error {
	sig, err := Sign(secrets, id, at, body)
	if err != nil {
		return err
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}

// DefaultTolerance is how far a request's timestamp may be from now for
// [Verify].
const DefaultTolerance = 5 * time.Minute

// ErrVerify is returned by [Verify] for a request that does not verify.
var ErrVerify = errors.New("webhook: signature does not verify")

// Verify checks a received request: its timestamp within tolerance of now
// (0 = [DefaultTolerance]) and one of its v1 signatures made with secret.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := ParseSecret(secret)
	if err != nil {
		return err
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	ts, err := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad %s", ErrVerify, HeaderTimestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp outside the tolerance", ErrVerify)
	}
	want := mac(key, h.Get(HeaderID), ts, body)
	for _, sig := range strings.Fields(h.Get(HeaderSignature)) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrVerify
}
