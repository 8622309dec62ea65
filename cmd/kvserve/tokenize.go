package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

func newTokenizeCmd() *cobra.Command {
	var modelPath string
	var noSpecial, parseSpecial bool
	cmd := &cobra.Command{
		Use:   "tokenize --model FILE TEXT",
		Short: "Print the token ids of TEXT, space-separated, on one line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gguf.Open(modelPath)
			if err != nil {
				return err
			}
			defer f.Close()
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				return fmt.Errorf("load tokenizer of %s: %w", modelPath, err)
			}
			ids := tok.Encode(args[0], !noSpecial, parseSpecial)
			parts := make([]string, len(ids))
			for i, id := range ids {
				parts[i] = strconv.Itoa(int(id))
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(parts, " "))
			return err
		},
	}
	cmd.Flags().StringVarP(&modelPath, "model", "m", "", "GGUF model (or vocab-only) file (required)")
	cmd.Flags().BoolVar(&noSpecial, "no-bos", false, "do not add the BOS/EOS tokens the model asks for")
	cmd.Flags().BoolVar(&parseSpecial, "parse-special", false, "recognise special-token texts such as <|im_start|>")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}
