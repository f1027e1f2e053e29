module github.com/wts-project/wts

go 1.26.8

require golang.org/x/sys v0.49.0
