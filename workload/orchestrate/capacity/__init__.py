"""`agentload capacity`: the largest load at which every traffic class meets its SLOs."""
