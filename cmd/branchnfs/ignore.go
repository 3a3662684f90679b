package main

import (
	"github.com/branchnfs/branchnfs/branches"
	"github.com/spf13/cobra"
)

const ignoreUsage = "pattern kept out of diffs and merge conflicts: a file name (*.log) or a path (node_modules/, build/**) (repeat for more; replaces the store's list; --ignore= alone ignores nothing)"

func addIgnoreFlag(cmd *cobra.Command, p *[]string) {
	cmd.Flags().StringArrayVar(p, "ignore", nil, ignoreUsage)
}

// ignoreList turns --ignore values into the list to store: nil when the
// flag was not given (the store keeps its list), empty for a lone
// --ignore=.
func ignoreList(flag []string) ([]string, error) {
	if flag == nil {
		return nil, nil
	}
	out := []string{}
	for _, p := range flag {
		if p != "" {
			out = append(out, p)
		}
	}
	if err := branches.CheckIgnore(out); err != nil {
		return nil, usagef("--ignore: %s", trimPrefix(err.Error(), "branches: "))
	}
	return out, nil
}
