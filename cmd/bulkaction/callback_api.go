package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/apiclient"
	"github.com/bulkaction/bulkaction/pkg/api"
)

// retryCallback is `callback retry --api`: POST …/callback/retry.
func (a *apiVerb) retryCallback(cmd *cobra.Command, id string, asJSON bool) error {
	var cb *api.Callback
	err := a.call(func(opts ...apiclient.CallOption) (err error) {
		cb, err = a.c.RetryCallback(cmd.Context(), id, opts...)
		return err
	})
	if err != nil {
		return apiError(err)
	}
	if asJSON {
		return printJSON(cmd, cb)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "callback of group %s to %s is pending again (attempts so far %d, webhook id %s)\n", id, cb.URL, cb.Attempts, cb.WebhookID)
	return nil
}

// callbackSecret is `callback secret --api`: GET or POST
// /v1/callback-secret, printed as without --api.
func (a *apiVerb) callbackSecret(cmd *cobra.Command, rotate bool) error {
	var s *api.CallbackSecret
	err := a.call(func(opts ...apiclient.CallOption) (err error) {
		if rotate {
			s, err = a.c.RotateCallbackSecret(cmd.Context(), opts...)
		} else {
			s, err = a.c.CallbackSecret(cmd.Context(), opts...)
		}
		return err
	})
	if err != nil {
		return apiError(err)
	}
	out := cmd.OutOrStdout()
	if rotate {
		fmt.Fprintln(out, s.Secret)
		if s.PreviousValidUntil != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "new callback secret of tenant %s (shown only now); the previous one also signs until %s\n",
				s.Tenant, s.PreviousValidUntil.UTC().Format(time.RFC3339))
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "new callback secret of tenant %s (shown only now)\n", s.Tenant)
		}
		return nil
	}
	if !s.Configured {
		fmt.Fprintf(out, "tenant %s has no callback secret: its callbacks cannot be signed (make one: bulkaction callback secret --tenant %s --rotate)\n", s.Tenant, s.Tenant)
		return nil
	}
	fmt.Fprintf(out, "tenant %s has a callback secret", s.Tenant)
	if s.CreatedAt != nil {
		fmt.Fprintf(out, " since %s", s.CreatedAt.UTC().Format(time.RFC3339))
	}
	if s.PreviousValidUntil != nil {
		fmt.Fprintf(out, "; the previous one also signs until %s", s.PreviousValidUntil.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(out)
	return nil
}
