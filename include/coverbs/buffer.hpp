#pragma once
/// @file
/// The two ends of a one-sided operation: `registered_span` (local memory a work request may name, with
/// its lkey; registered_span.hpp) and `remote_key` (a peer's memory: address, length and rkey, as exchanged
/// out of band; remote_key.hpp).

#include <coverbs/registered_span.hpp>
#include <coverbs/remote_key.hpp>
