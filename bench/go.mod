module github.com/ctrlkit/ctrlkit/bench

go 1.26.0
