package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "toolfleet",
		Short: "A fleet of gRPC services that executes tools for LLM agents",
		Long: `toolfleet serves tools defined as Protobuf contracts to LLM agents and services.

Start everything locally with 'toolfleet dev'.`,
		SilenceUsage:  true,
		SilenceErrors: true, // main prints each error once
	}
	root.AddCommand(newDevCommand(), newNewCommand(), newAddCommand())
	root.AddCommand(newToolsCommand(), newMCPCommand(), newAgentCommand(), newProgramCommand(), newApprovalsCommand(), newConnectionsCommand())
	for _, c := range root.Commands() {
		refuseUnknownSubcommands(c)
	}
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (`toolfleet tools`, `toolfleet agent`, …) fail on a word that names none of
// them, with cobra's suggestions, instead of printing its help and exiting 0
// (cobra does that only for the root). Without a word it still prints help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Run != nil || c.RunE != nil {
		return
	}
	c.Args = cobra.ArbitraryArgs
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default, set only on the root
	}
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())
	}
}
