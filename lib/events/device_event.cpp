#include <coverbs/device_event.hpp>

namespace coverbs {

const char* device_event::name_of(ibv_event_type type) noexcept { return ibv_event_type_str(type); }

bool device_event::port_event() const noexcept {
  switch (type) {
  case IBV_EVENT_PORT_ACTIVE:
  case IBV_EVENT_PORT_ERR:
  case IBV_EVENT_LID_CHANGE:
  case IBV_EVENT_PKEY_CHANGE:
  case IBV_EVENT_SM_CHANGE:
  case IBV_EVENT_CLIENT_REREGISTER:
  case IBV_EVENT_GID_CHANGE: return true;
  default: return false;
  }
}

bool device_event::qp_event() const noexcept {
  switch (type) {
  case IBV_EVENT_QP_FATAL:
  case IBV_EVENT_QP_REQ_ERR:
  case IBV_EVENT_QP_ACCESS_ERR:
  case IBV_EVENT_COMM_EST:
  case IBV_EVENT_SQ_DRAINED:
  case IBV_EVENT_PATH_MIG:
  case IBV_EVENT_PATH_MIG_ERR:
  case IBV_EVENT_QP_LAST_WQE_REACHED: return true;
  default: return false;
  }
}

}  // namespace coverbs
