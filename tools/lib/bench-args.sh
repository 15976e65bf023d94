# Sourced by the benchmark runners that read counts or lists of counts from their command line (bench-rate,
# bench-calls, bench-datapath, bench-datagram, bench-instructions). The runner defines usage_error MESSAGE (its
# message and its usage line on stderr, exit 2).
# shellcheck shell=bash

count() {  # FLAG VALUE MIN MAX: a whole number in range (decimal, leading zeros allowed), else a usage error
  [[ ${2:-} =~ ^0*[0-9]{1,9}$ ]] && ((10#$2 >= $3 && 10#$2 <= $4)) && return 0
  usage_error "$1 takes a whole number from $3 to $4 (got '${2:-}')"
}
numbers() {  # FLAG VALUE MIN MAX: a comma-separated list of such numbers; prints it in decimal
  local v out=()
  [[ ${2:-} =~ ^[0-9]+(,[0-9]+)*$ ]] ||
    usage_error "$1 takes a comma-separated list of whole numbers from $3 to $4 (got '${2:-}')"
  for v in ${2//,/ }; do count "$1" "$v" "$3" "$4"; out+=($((10#$v))); done
  local IFS=,; echo "${out[*]}"
}
