package main

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/server"
	"github.com/spf13/cobra"
)

// targetCommands are `bulkaction fetcher`, `dispatcher`, `worker`, `aggregator`.
func targetCommands() []*cobra.Command {
	var cmds []*cobra.Command
	for _, t := range stack.AllTargets {
		c := &cobra.Command{
			Use:   t,
			Short: "Run the " + t + " target",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return serve(cmd, []string{t})
			},
		}
		if t == stack.TargetGateway {
			c.AddCommand(newGatewayKeyCmd()) // bulkaction gateway key
		}
		cmds = append(cmds, c)
	}
	return cmds
}

func newRunCmd() *cobra.Command {
	var targets string
	cmd := &cobra.Command{
		Use:   "run --targets fetcher,dispatcher,...",
		Short: "Run one or more targets in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := stack.ParseTargets(targets)
			if err != nil {
				return err
			}
			return serve(cmd, ts)
		},
	}
	cmd.Flags().StringVar(&targets, "targets", "all", "comma-separated targets: "+strings.Join(stack.AllTargets, ", ")+", or all")
	return cmd
}

// serve runs targets until SIGINT/SIGTERM, then drains and returns nil:
// the start-up path of every bulkaction process ([server.Run]).
func serve(cmd *cobra.Command, targets []string) error {
	return server.Run(cmd.Context(), targets, nil)
}

func newConfigCmd() *cobra.Command {
	var markdown bool
	cmd := &cobra.Command{
		Use:   "config",
		Short: "List every BULKACTION_* variable with the value in effect, where it comes from, and its meaning",
		Long: `Config lists every BULKACTION_* variable with the value in effect here (the
environment applied to the defaults), where that value comes from
("environment" or "default"), and what it means. Passwords, tokens and
credentials in URLs are never printed. A variable with a bad value is
reported as the error every command would give.

With --markdown it prints the defaults as a Markdown table (the README's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			t := reflect.TypeOf(config.Config{})
			if markdown {
				fmt.Fprintln(out, "| variable | default | meaning |")
				fmt.Fprintln(out, "| --- | --- | --- |")
				for i := 0; i < t.NumField(); i++ {
					f := t.Field(i)
					def := f.Tag.Get("default")
					if def == "" {
						def = " "
					} else {
						def = "`" + def + "`"
					}
					fmt.Fprintf(out, "| `%s` | %s | %s |\n", config.Prefix+"_"+f.Tag.Get("envconfig"), def, f.Tag.Get("desc"))
				}
				return nil
			}
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			v := reflect.ValueOf(cfg).Elem()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VARIABLE\tVALUE\tFROM\tMEANING")
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				name := config.Prefix + "_" + f.Tag.Get("envconfig")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, settingValue(f, v.Field(i)), settingSource(f), f.Tag.Get("desc"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print the defaults as a Markdown table")
	return cmd
}

// settingValue is a setting's value as config prints it: secrets as
// "(set)", URLs without credentials, "" as "(empty)".
func settingValue(f reflect.StructField, v reflect.Value) string {
	s := fmt.Sprint(v.Interface())
	switch {
	case s == "":
		return "(empty)"
	case strings.Contains(f.Tag.Get("desc"), "never printed"):
		return "(set)"
	case strings.HasSuffix(f.Name, "URL"):
		return config.RedactURL(s)
	}
	return s
}

// settingSource says where a setting's value comes from: the prefixed
// variable, the unprefixed one (read when the prefixed one is not set,
// except for credentials and TLS files), or the default.
func settingSource(f reflect.StructField) string {
	key := f.Tag.Get("envconfig")
	if _, ok := os.LookupEnv(config.Prefix + "_" + key); ok {
		return "environment"
	}
	if f.Tag.Get("prefixonly") != "true" {
		if _, ok := os.LookupEnv(key); ok {
			return "environment (" + key + ")"
		}
	}
	return "default"
}
