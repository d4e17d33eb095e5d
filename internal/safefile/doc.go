// Package safefile holds the file checks that ctrlkit makes wherever it
// reads what another local user could have put in its way (the API
// server's sources and data, snapshots, serving certificates): who owns a
// file, and opening one only if it is a regular file, without following a
// link or waiting for a writer. What each caller then accepts (its own
// files only, or root's too; sticky folders) is its own rule.
package safefile
