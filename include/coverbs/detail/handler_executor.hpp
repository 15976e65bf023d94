#pragma once
// Whether a completion handler brings an executor of its own (a coroutine's use_awaitable, bind_executor,
// a strand, use_future's), as opposed to a plain callback, whose associated executor is only the default.

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/is_executor.hpp>

#include <type_traits>

namespace coverbs::detail {

/// Stands for "no executor" as the default of associated_executor; never used as an executor.
struct no_associated_executor {};

template <class Handler>
inline constexpr bool has_associated_executor_v =
    !std::is_same_v<boost::asio::associated_executor_t<std::decay_t<Handler>, no_associated_executor>,
                    no_associated_executor>;

/// An Asio executor of either model (standard executors, and the Networking TS ones).
template <class T>
inline constexpr bool is_any_executor_v =
    boost::asio::execution::is_executor<T>::value || boost::asio::is_executor<T>::value;

}  // namespace coverbs::detail
