// Package paysim is the signing library of the provider simulator: it builds notifications in
// each provider's real wire format, signed (and, for WeChat Pay, encrypted) with test keys, and
// generates that test key material.
//
// It is written independently of callbackd's adapters, from the providers' published formats,
// so that the adapters are tested against a second implementation; interoperability tests also
// check it against the providers' official SDKs. Everything here is for tests, demos and load
// generation: keys are created with crypto/rand at run time and never leave the process except
// as files the caller asks for.
package paysim
