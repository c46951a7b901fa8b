"""Ingest: the user's paths become captures, one per input file.

`formats` is the one registry of input formats (suffixes, sniffing, how each is read);
`discover` turns paths, folders and globs into inputs (and batch roots into jobs); `nsys_export`
turns reports into SQLite exports; `capture` holds the native readers' whole-column tables;
`identity` says which rank a capture's process is.
"""
