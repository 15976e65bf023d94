#pragma once
// The hook between `loop_pool` (which places queue pairs on its members) and the layer whose options carry such
// a placement: `loop_pool::member::connection_options()` without an options type fills
// `placement_options<default_placement>::type`, which that layer defines (coverbs/connection_options.hpp:
// `connection_options`). So the pool names no connection layer, and builds without librdmacm. Not public.

namespace coverbs::detail {

/// The options type argument of `member::connection_options()` called without one.
struct default_placement {};

/// `type`: the options type a `default_placement` stands for. Declared only; specialized by the layer above.
template <class Tag>
struct placement_options;

}  // namespace coverbs::detail
