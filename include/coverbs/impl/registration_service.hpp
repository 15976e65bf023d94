#pragma once
// Template bodies of registration_service.hpp.

#include <coverbs/detail/token_check.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace coverbs::detail {

/// The inputs of a request, filled by the free functions.
struct request_args {
  request_kind kind = request_kind::reg;
  ibv_pd* pd = nullptr;
  std::span<std::byte> buffer;
  access rights = access::none;
  int rereg_flags = 0;
};

/// The region a request owns, as the caller's `memory_region` (counted as handed over).
memory_region hand_over(request& r) noexcept;

template <typename Result>
Result take_result(request& r) noexcept {
  if constexpr (std::is_same_v<Result, shared_region>) {
    return r.shared ? shared_region(std::move(r.shared), r.buffer) : shared_region();
  } else if constexpr (std::is_same_v<Result, rereg_result>) {
    return rereg_result{hand_over(r), r.method};
  } else {
    return hand_over(r);
  }
}

/// A request with its handler: allocated with the handler's associated allocator, completed through the
/// handler's associated executor (tracked as outstanding work until then).
template <typename Handler, typename Executor, typename Result>
class request_op final : public request {
public:
  request_op(Handler&& handler, const Executor& ex)
      : handler_(std::move(handler)), work_(boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked)) {
  }

  void complete(std::shared_ptr<request> self) noexcept override {
    auto alloc = boost::asio::get_associated_allocator(handler_);
    auto ex = *work_;
    boost::asio::post(ex, boost::asio::bind_allocator(alloc, [self = std::move(self)]() mutable {
                        static_cast<request_op&>(*self).invoke(std::move(self));
                      }));
  }

  Handler& handler() noexcept { return handler_; }

private:
  void invoke(std::shared_ptr<request> self) {
    auto slot = boost::asio::get_associated_cancellation_slot(handler_);
    if (slot.is_connected()) slot.clear();
    Handler handler = std::move(handler_);
    const error_code ec = this->ec;
    Result result = take_result<Result>(*this);
    work_.reset();
    self.reset(); // the request is freed before the upcall, as Asio's own operations do
    std::move(handler)(ec, std::move(result));
  }

  Handler handler_;
  std::optional<std::decay_t<decltype(boost::asio::prefer(std::declval<const Executor&>(),
                                                          boost::asio::execution::outstanding_work.tracked))>>
      work_;
};

/// Forwards a cancellation signal to the core.
struct request_canceller {
  std::shared_ptr<request> r;
  void operator()(boost::asio::cancellation_type_t type) const noexcept {
    if (type != boost::asio::cancellation_type::none)
      if (auto core = r->core.lock()) core->cancel(r);
  }
};

/// `NeedsOwnExecutor`: the request has no executor to fall back on (`reg_mr` on the default service without
/// one): a handler without an associated executor of its own is refused at compile time.
template <typename Result, bool NeedsOwnExecutor = false>
struct initiate_request {
  template <typename Handler>
  void operator()(Handler&& handler, registration_service* service, registration_service::executor_type fallback,
                  request_args args, memory_region region) const {
    static_assert(!NeedsOwnExecutor || has_associated_executor_v<Handler>,
                  "reg_mr(pd, buffer, rights, handler): the handler has no associated executor, and the default "
                  "registration service has no loop to run it on (it would run on a thread of Asio's system "
                  "executor). Name the executor: reg_mr(io.get_executor(), pd, buffer, rights, handler) or "
                  "reg_mr(io, pd, ...), or bind the handler: asio::bind_executor(ex, handler)");
    auto ex = boost::asio::get_associated_executor(handler, fallback);
    using op_type = request_op<std::decay_t<Handler>, decltype(ex), Result>;
    auto alloc = boost::asio::get_associated_allocator(handler);
    using op_alloc = typename std::allocator_traits<decltype(alloc)>::template rebind_alloc<op_type>;
    auto r = std::allocate_shared<op_type>(op_alloc(alloc), std::move(handler), ex);
    const auto& core = service->core();
    r->core = core;
    r->acct = core->acct();
    r->kind = args.kind;
    r->pd = args.pd;
    r->buffer = args.buffer;
    r->rights = args.rights;
    r->rereg_flags = args.rereg_flags;
    if (region) {
      r->mr_rights = region.rights();
      r->mr = region.release();
      core->acct()->taken_back.fetch_add(1, std::memory_order_relaxed);
      core->acct()->bytes_held.fetch_add(static_cast<std::int64_t>(r->mr->length), std::memory_order_relaxed);
    }
    auto slot = boost::asio::get_associated_cancellation_slot(r->handler());
    if (slot.is_connected()) slot.template emplace<request_canceller>(request_canceller{r});
    if (core->submit(r)) {
      boost::asio::post(ex, [weak = std::weak_ptr<registration_core>(core)] {
        if (auto c = weak.lock()) c->kick();
      });
    }
  }
};

template <typename Result, typename CompletionToken>
auto start_request(registration_service& service, CompletionToken&& token, request_args args,
                   memory_region region = {}) {
  return detail::initiate_checked<CompletionToken, void(error_code, Result)>(
      initiate_request<Result>{}, token, &service, service.get_executor(), args, std::move(region));
}

/// `reg_mr` on the default service: handlers complete on their associated executor, else on `fallback`; with
/// no fallback (`NeedsOwnExecutor`) they must have one.
template <bool NeedsOwnExecutor, typename CompletionToken>
auto start_default_reg(registration_service::executor_type fallback, protection_domain& pd,
                       std::span<std::byte> buffer, access rights, CompletionToken&& token) {
  registration_service& service = default_registration_service();
  if (!fallback) fallback = service.get_executor();
  return detail::initiate_checked<CompletionToken, void(error_code, memory_region)>(
      initiate_request<memory_region, NeedsOwnExecutor>{}, token, &service, std::move(fallback),
      request_args{request_kind::reg, pd.native_handle(), buffer, rights, 0}, memory_region());
}

} // namespace coverbs::detail

namespace coverbs {

template <completion_token_or_handler<void(error_code, memory_region)> CompletionToken>
auto reg_mr(registration_service& service, protection_domain& pd, std::span<std::byte> buffer, access rights,
            CompletionToken&& token) {
  return detail::start_request<memory_region>(
      service, std::forward<CompletionToken>(token),
      detail::request_args{detail::request_kind::reg, pd.native_handle(), buffer, rights, 0});
}

template <completion_token_or_handler<void(error_code, memory_region)> CompletionToken>
auto reg_mr(protection_domain& pd, std::span<std::byte> buffer, access rights, CompletionToken&& token) {
  return detail::start_default_reg<true>({}, pd, buffer, rights, std::forward<CompletionToken>(token));
}

template <typename Executor, completion_token_or_handler<void(error_code, memory_region)> CompletionToken>
  requires detail::is_any_executor_v<Executor>
auto reg_mr(const Executor& ex, protection_domain& pd, std::span<std::byte> buffer, access rights,
            CompletionToken&& token) {
  return detail::start_default_reg<false>(registration_service::executor_type(ex), pd, buffer, rights,
                                          std::forward<CompletionToken>(token));
}

template <typename ExecutionContext, completion_token_or_handler<void(error_code, memory_region)> CompletionToken>
  requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
auto reg_mr(ExecutionContext& context, protection_domain& pd, std::span<std::byte> buffer, access rights,
            CompletionToken&& token) {
  return reg_mr(context.get_executor(), pd, buffer, rights, std::forward<CompletionToken>(token));
}

template <completion_token_or_handler<void(error_code, shared_region)> CompletionToken>
auto reg_shared(registration_service& service, protection_domain& pd, std::span<std::byte> buffer, access rights,
                CompletionToken&& token) {
  return detail::start_request<shared_region>(
      service, std::forward<CompletionToken>(token),
      detail::request_args{detail::request_kind::reg_shared, pd.native_handle(), buffer, rights, 0});
}

template <completion_token_or_handler<void(error_code, memory_region)> CompletionToken>
auto dereg(registration_service& service, memory_region&& region, CompletionToken&& token) {
  return detail::start_request<memory_region>(
      service, std::forward<CompletionToken>(token),
      detail::request_args{detail::request_kind::dereg, nullptr, {}, access::none, 0}, std::move(region));
}

template <completion_token_or_handler<void(error_code, rereg_result)> CompletionToken>
auto rereg(registration_service& service, memory_region&& region, const rereg_request& change,
           CompletionToken&& token) {
  detail::request_args args{detail::request_kind::rereg, region.pd(), region.buffer(), region.rights(), 0};
  if (change.buffer) args.buffer = *change.buffer, args.rereg_flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
  if (change.rights) args.rights = *change.rights, args.rereg_flags |= IBV_REREG_MR_CHANGE_ACCESS;
  if (change.pd) args.pd = change.pd->native_handle(), args.rereg_flags |= IBV_REREG_MR_CHANGE_PD;
  return detail::start_request<rereg_result>(service, std::forward<CompletionToken>(token), args, std::move(region));
}

} // namespace coverbs
