# `strata -h` as help2man reads an option list: memcached's -h starts its
# option lines at column 0 and lists -o's options as "   - name: text";
# help2man wants them indented under an "Options:" heading, each starting
# with a dash. Only the layout changes: every word of `strata -h` stays.
NR == 1 { print "Options:"; next }                  # "strata VERSION ...": the page's footer already says it
/^-/ || /^    --/ { print "  " $0; next }           # a flag
/^   - [a-z_]+:/ { sub(/^   - /, "  -o "); sub(/: /, "  "); print; next }   # an -o option
{ print }                                           # continuation lines, already indented
