package main

import (
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
	root.AddCommand(newDevCommand(), newNewCommand())
	root.AddCommand(newToolsCommand(), newMCPCommand(), newAgentCommand(), newProgramCommand(), newApprovalsCommand())
	return root
}
