"""What a machine is and can do: device discovery per framework (`devices`), device peaks from the
editable table or calibrated here (`peaks`), and the published figures of devices (`references`)."""
