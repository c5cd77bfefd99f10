// Package repocheck holds checks over the repository's own files, run as tests: the
// repository must stand on its own, so its code and documentation may not cite documents
// that live outside it.
package repocheck
