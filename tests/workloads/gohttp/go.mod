module gohttp

go 1.22
