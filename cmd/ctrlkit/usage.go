package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one ctrlkit command: its name as typed ("run foo"), a one-line
// summary, and the function that runs it with the arguments after its name.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var (
	// errUsage: the command line was wrong; what was wrong and the usage are
	// printed already. main exits 2.
	errUsage = errors.New("usage")
	// errHelpShown: the command printed its help because it was asked to.
	errHelpShown = errors.New("help shown")
)

// helpShown is the errHelpShown a command returns from parseFlags; it carries
// the command's flag set, so the top-level usage can list its flags.
type helpShown struct{ fs *flag.FlagSet }

func (helpShown) Error() string        { return errHelpShown.Error() }
func (helpShown) Is(target error) bool { return target == errHelpShown }

const usageHead = `ctrlkit runs the sample controllers, and the embedded Kubernetes API server
(kube-apiserver + etcd on 127.0.0.1) that ctrlkit's tests and the demo use.

usage:
  ctrlkit <command> [flags]
  ctrlkit help <command>        the same as: ctrlkit <command> --help
`

// lookup finds the command that args start with (one or two words).
func lookup(args []string) (c command, rest []string, ok bool) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			return c, args[len(words):], true
		}
	}
	return command{}, nil, false
}

// isGroup reports whether word starts two-word commands ("apiserver", "run").
func isGroup(word string) bool {
	for _, c := range commands {
		if strings.HasPrefix(c.name, word+" ") {
			return true
		}
	}
	return false
}

func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

// parseFlags parses a command's flags. On -h or --help it prints the
// command's usage to stdout and returns a helpShown; on a wrong flag or a
// stray argument it prints what was wrong and the usage to the flag set's
// output (stderr) and returns errUsage.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	stderr := fs.Output()
	fs.SetOutput(io.Discard) // flag's own messages are replaced by ours
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		commandUsage(stdout, fs)
		return helpShown{fs}
	case err != nil:
		fmt.Fprintf(stderr, "ctrlkit %s: %v\n\n", fs.Name(), err)
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "ctrlkit %s: unexpected argument %q\n\n", fs.Name(), fs.Arg(0))
	default:
		return nil
	}
	commandUsage(stderr, fs)
	return errUsage
}

// commandUsage is one command's help: synopsis, summary, every flag.
func commandUsage(w io.Writer, fs *flag.FlagSet) {
	c, _, _ := lookup(strings.Fields(fs.Name()))
	fmt.Fprintf(w, "usage: ctrlkit %s [flags]\n\n%s\n", fs.Name(), c.summary)
	if hasFlags(fs) {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs, "  ")
	}
}

// printUsage lists every command (of one group, when group is not "") with
// every flag, as each command's own flag set declares them.
func printUsage(ctx context.Context, w io.Writer, group string) {
	fmt.Fprint(w, usageHead)
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		if group != "" && !strings.HasPrefix(c.name, group+" ") {
			continue
		}
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
		var h helpShown
		if err := c.run(ctx, []string{"-h"}, io.Discard, io.Discard); errors.As(err, &h) {
			printFlags(w, h.fs, "      ")
		}
	}
}

// printFlags writes one line per flag: name, value placeholder, usage and a
// non-zero default.
func printFlags(w io.Writer, fs *flag.FlagSet, indent string) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		flagName := "--" + f.Name
		if name != "" {
			flagName += " " + name
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "%s%-26s %s\n", indent, flagName, usage)
	})
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// usageError reports flags that parsed but do not make sense together (or
// a value a library refused): like parseFlags for a wrong flag, it prints
// what was wrong and the usage to the flag set's output (stderr) and
// returns errUsage.
func usageError(fs *flag.FlagSet, err error) error {
	fmt.Fprintf(fs.Output(), "ctrlkit %s: %v\n\n", fs.Name(), err)
	commandUsage(fs.Output(), fs)
	return errUsage
}
