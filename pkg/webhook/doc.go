// Package webhook signs completion callbacks in the Standard Webhooks format
// (https://www.standardwebhooks.com): a request carries the headers
// webhook-id (the same on every attempt of one delivery), webhook-timestamp
// (unix seconds) and webhook-signature, one "v1,<base64 HMAC-SHA256>" per
// signing secret, space-separated, of "<id>.<timestamp>.<body>". Secrets are
// written "whsec_<base64 of the key>"; during a rotation two secrets sign, so
// that a receiver holding either one verifies. Receivers verify with any
// Standard Webhooks library, or with [Verify].
package webhook
