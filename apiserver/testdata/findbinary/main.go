// Command findbinary calls apiserver.Binary as a program that depends on
// ctrlkit does, prints what it returns, and runs it, as Start would. The tests build it with
// -trimpath, as the module proxy's users and release builds are: the
// compiler then records no checkout to build the API server from.
package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/ctrlkit/ctrlkit/apiserver"
)

func main() {
	bin, err := apiserver.Binary(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
	out, err := exec.Command(bin, "--version").CombinedOutput()
	fmt.Printf("%s: %v\n%s", bin, err, out)
}
