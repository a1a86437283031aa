# Sourced by scripts/ensure-*: install a Debian package that some tests drive,
# when its tool is missing. Without root (or when apt-get fails) print one line
# saying so and go on: the tests that need the tool then skip, each saying why
# (tests/helpers/tools.py), and the rest of the suite runs.
#
# DUE_TEST_HIDE_TOOLS="faketime promtool" makes those tools missing here and in
# the tests: what a machine without them, and without root, sees.

hidden_tool() {  # TOOL: hidden by DUE_TEST_HIDE_TOOLS?
  case " ${DUE_TEST_HIDE_TOOLS:-} " in
    *" $1 "* | *" $1,"* | *",$1 "* | *",$1,"*) return 0 ;;
  esac
  return 1
}

install_tool() {  # TOOL PACKAGE [apt-get options...]: 0 when installed
  local tool=$1 package=$2
  shift 2
  if { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" "$package" \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" "$package"; }; \
    } >/dev/null 2>&1 && ! hidden_tool "$tool"; then
    echo "$tool was missing: installed Debian's $package"
    return 0
  fi
  echo "WARNING: $tool is missing and could not be installed (apt-get install $package needs root: sudo apt-get install $package); the tests that need $tool will be SKIPPED" >&2
  return 1
}
