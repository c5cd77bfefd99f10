// Package wire holds the wire contracts between gateway and pylon: the header names of
// the routing contract, the registration snapshot a pylon PUTs to every gateway (with the
// 17 published stats fields per model), and the compact x-pylon-load report carried on
// every pylon response. Pure: encoding and decoding only.
package wire
